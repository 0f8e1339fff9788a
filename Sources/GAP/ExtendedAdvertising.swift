// Extended advertising and scanning (Core Specification v5.4, Vol 4, Part E,
// §7.8.53–§7.8.66; Vol 6, Part B, §2.3.4). A controller that has them is driven
// with them for everything (as Bumble and BlueZ do): once a host has used an
// extended advertising or scanning command, the legacy ones may be refused until
// reset (§3.1.1 of Part E, "legacy and extended commands").

import HCI

extension ControllerInfo {
    /// Whether the controller has extended advertising, scanning and connecting:
    /// the LE feature bit and the commands.
    public var supportsExtendedAdvertising: Bool {
        leFeatures.contains(bit: LEFeatures.extendedAdvertising)
            && supports(.leSetExtendedAdvertisingParameters) && supports(.leSetExtendedAdvertisingData)
            && supports(.leSetExtendedAdvertisingEnable) && supports(.leSetExtendedScanParameters)
            && supports(.leSetExtendedScanEnable) && supports(.leExtendedCreateConnection)
    }
}

extension Advertiser {
    /// Starts advertising set `handle` (0 unless told) with the extended commands. Up
    /// to 31 bytes (advertisement and scan response each) go out as legacy PDUs, which
    /// every scanner hears; more goes out as extended PDUs (heard by extended scanners
    /// only), where a connectable set cannot be scannable: the scan response's
    /// structures are then appended to the advertisement. Throws `AdvertisingDataError.tooLong` before sending anything
    /// when the data is longer than the controller's `maximumLength` (LE Read Maximum
    /// Advertising Data Length) or, connectable, than one AUX_ADV_IND holds
    /// (`connectableExtendedDataLength`).
    /// Each set's Advertising_SID is its handle's low 4 bits: scanners tell a device's
    /// sets apart by it (and name a periodic train by address and SID).
    /// With `randomAddress` the set advertises from it (LE Set Advertising Set Random
    /// Address, own address type random); else from the public address. The other
    /// sets the controller advertises are left as they are. `duration` (10 ms units) and
    /// `maximumEvents` end the set by themselves (LE Advertising Set Terminated); 0: no limit.
    /// `filterPolicy`: Advertising_Filter_Policy (bit 0 scan requests, bit 1 connection
    /// requests only from the Filter Accept List's devices). `phys`: the primary and
    /// secondary advertising PHYs (1 LE 1M, 2 LE 2M, 3 LE Coded); a set whose primary
    /// PHY is not LE 1M goes out as extended PDUs whatever its length (legacy PDUs are
    /// LE 1M's alone, §7.8.53). `directed`: connectable directed advertising to that
    /// device alone (`extendedPDUs` says which PDUs).
    public static func startExtended(_ controller: HCIController, data: AdvertisingData, scanResponse: AdvertisingData? = nil,
                                     connectable: Bool = true, intervalMilliseconds: Double = 100, maximumLength: Int,
                                     randomAddress: BluetoothAddress? = nil, handle: UInt8 = 0,
                                     duration: UInt16 = 0, maximumEvents: UInt8 = 0, extended: Bool = false, filterPolicy: UInt8 = 0,
                                     phys: (primary: UInt8, secondary: UInt8) = (1, 1), directed: DirectedTarget? = nil) async throws {
        try await configureExtended(controller, data: data, scanResponse: scanResponse, connectable: connectable,
                                    intervalMilliseconds: intervalMilliseconds, maximumLength: maximumLength, randomAddress: randomAddress,
                                    handle: handle, extended: extended, filterPolicy: filterPolicy, phys: phys, directed: directed)
        try await controller.send(LESetExtendedAdvertisingEnable(enable: true, sets: [
            .init(advertisingHandle: handle, duration: duration, maxExtendedAdvertisingEvents: maximumEvents)]))
    }

    /// What `startExtended` does but the enable: the set is stopped and holds its
    /// parameters, address and data, off air (as a set needs before periodic
    /// advertising is set up on it, or before it is enabled later).
    public static func configureExtended(_ controller: HCIController, data: AdvertisingData, scanResponse: AdvertisingData? = nil,
                                         connectable: Bool = true, intervalMilliseconds: Double = 100, maximumLength: Int,
                                         randomAddress: BluetoothAddress? = nil, handle: UInt8 = 0, extended: Bool = false,
                                         filterPolicy: UInt8 = 0, phys: (primary: UInt8, secondary: UInt8) = (1, 1),
                                         directed: DirectedTarget? = nil) async throws {
        let (adv, rsp, properties) = try extendedPDUs(data: data, scanResponse: scanResponse, connectable: connectable,
                                                      maximumLength: maximumLength, extended: extended || phys.primary != 1, directed: directed)
        let legacy = properties & 0x10 != 0
        // ADV_DIRECT_IND carries neither data nor a scan response: none is set (§7.8.54).
        let directedLegacy = legacy && properties & 0x04 != 0
        let units = UInt32(Swift.max(32, Swift.min(16384, intervalMilliseconds / 0.625)))
        _ = try? await controller.send(LESetExtendedAdvertisingEnable(enable: false, sets: [.init(advertisingHandle: handle)]))
        if directed != nil {
            // A set holding data or a scan response refuses parameters that cannot carry
            // them (Rootcanal, by §7.8.53): emptied first. A set not created yet, or one
            // that takes no scan response, refuses this harmlessly.
            for c in fragments([], LESetExtendedAdvertisingData.self, handle: handle) { _ = try? await controller.send(c) }
            for c in fragments([], LESetExtendedScanResponseData.self, handle: handle) { _ = try? await controller.send(c) }
        }
        try await controller.send(LESetExtendedAdvertisingParameters(
            advertisingHandle: handle, advertisingEventProperties: properties, primaryAdvertisingIntervalMin: units,
            primaryAdvertisingIntervalMax: units, ownAddressType: randomAddress == nil ? .public : .random,
            peerAddressType: directed?.addressType ?? .public, peerAddress: directed?.address ?? .zero, advertisingFilterPolicy: filterPolicy,
            primaryAdvertisingPHY: legacy ? 1 : phys.primary, secondaryAdvertisingPHY: legacy ? 1 : phys.secondary, advertisingSID: handle & 0x0F))
        if let randomAddress {
            try await controller.send(LESetAdvertisingSetRandomAddress(advertisingHandle: handle, randomAddress: randomAddress))
        }
        if !directedLegacy {
            for c in fragments(adv, LESetExtendedAdvertisingData.self, handle: handle) { try await controller.send(c) }
        }
        if legacy, properties != 0x10, !directedLegacy {
            for c in fragments(rsp, LESetExtendedScanResponseData.self, handle: handle) { try await controller.send(c) }
        }
    }

    /// What `startExtended` puts in a set: its advertising data, scan response data and
    /// Advertising_Event_Properties. Throws `AdvertisingDataError.tooLong` as it does,
    /// so a host can check data it will send later. `extended`: extended PDUs even for
    /// data that fits legacy ones (a set with periodic advertising, §7.8.61).
    /// `directed`: ADV_DIRECT_IND (legacy, high or low duty cycle) when there is no data
    /// and no need of extended PDUs; else connectable directed extended PDUs (low duty
    /// cycle only: §7.8.53 has no high duty cycle for them), whose AUX_ADV_IND carries
    /// the data (and the scan response's, as for any connectable extended set).
    public static func extendedPDUs(data: AdvertisingData, scanResponse: AdvertisingData?, connectable: Bool,
                                    maximumLength: Int, extended: Bool = false,
                                    directed: DirectedTarget? = nil) throws -> (data: [UInt8], scanResponse: [UInt8], properties: UInt16) {
        let adv = data.bytes, rsp = scanResponse?.bytes ?? []
        if let directed {
            // Legacy ADV_DIRECT_IND: 0b10101 low duty, 0b11101 high duty.
            if adv.isEmpty, rsp.isEmpty, !extended { return ([], [], directed.highDutyCycle ? 0x1D : 0x15) }
            let limit = directed.highDutyCycle ? 0 : Swift.min(maximumLength, LESetExtendedAdvertisingParameters.maximumDataLength(properties: 0x05))
            guard adv.count + rsp.count <= limit, !directed.highDutyCycle || !extended else {
                throw AdvertisingDataError.tooLong(length: adv.count + rsp.count, limit: limit)
            }
            return (adv + rsp, [], 0x05)
        }
        if adv.count <= 31 && rsp.count <= 31 && !extended {
            // Legacy PDUs: ADV_IND 0b10011, ADV_SCAN_IND 0b10010, ADV_NONCONN_IND 0b10000.
            return (adv, rsp, connectable ? 0x13 : (rsp.isEmpty ? 0x10 : 0x12))
        }
        let limit = connectable ? Swift.min(maximumLength, connectableExtendedDataLength) : maximumLength
        guard adv.count + rsp.count <= limit else { throw AdvertisingDataError.tooLong(length: adv.count + rsp.count, limit: limit) }
        return (adv + rsp, [], connectable ? 0x01 : 0x00)
    }

    /// Stops the sets `handles` (set 0 unless told); an empty list stops every set
    /// (Num_Sets 0, §7.8.56).
    public static func stopExtended(_ controller: HCIController, handles: [UInt8] = [0]) async throws {
        try await controller.send(LESetExtendedAdvertisingEnable(enable: false, sets: handles.map { .init(advertisingHandle: $0) }))
    }

    /// Enables sets whose parameters and data the controller holds already (as after
    /// `stopExtended`), each with its own duration and event limit.
    public static func resumeExtended(_ controller: HCIController, sets: [LESetExtendedAdvertisingEnable.AdvertisingSet]) async throws {
        guard !sets.isEmpty else { return }
        try await controller.send(LESetExtendedAdvertisingEnable(enable: true, sets: sets))
    }

    /// Stops set `handle` and has the controller forget it (LE Remove Advertising Set, §7.8.59).
    public static func removeExtended(_ controller: HCIController, handle: UInt8) async throws {
        _ = try? await controller.send(LESetExtendedAdvertisingEnable(enable: false, sets: [.init(advertisingHandle: handle)]))
        try await controller.send(LERemoveAdvertisingSet(advertisingHandle: handle))
    }

    /// The most advertising data connectable extended advertising (the properties
    /// `startExtended` uses, 0x01) carries: what one AUX_ADV_IND holds, 246 octets.
    public static let connectableExtendedDataLength = LESetExtendedAdvertisingParameters.maximumDataLength(properties: 0x01)

    /// Data in commands of at most 251 bytes: complete (3), or first (1), intermediate (0)…, last (2).
    static func fragments<C: LEExtendedAdvertisingPayloadCommand>(_ data: [UInt8], _: C.Type, handle: UInt8) -> [C] {
        advertisingDataFragments(data, maximum: C.maximumFragmentLength).map {
            C(advertisingHandle: handle, operation: $0.operation, fragmentPreference: 1, data: $0.data)
        }
    }
}

extension Scanner {
    /// LE Set Extended Scan Parameters and LE Set Extended Scan Enable. `phys`:
    /// Scanning_PHYs (bit 0 LE 1M, bit 2 LE Coded), each scanned with the same
    /// interval and window.
    public static func enableExtended(_ controller: HCIController, active: Bool = true, filterDuplicates: Bool = true,
                                      interval: UInt16 = 0x0060, window: UInt16 = 0x0030, ownAddressType: AddressType = .public,
                                      filterPolicy: UInt8 = 0, phys: UInt8 = 0x01) async throws {
        let each = LEExtendedScanPHYParameters(scanType: active ? 1 : 0, scanInterval: interval, scanWindow: window)
        try await controller.send(LESetExtendedScanParameters(ownAddressType: ownAddressType, scanningFilterPolicy: filterPolicy, scanningPHYs: phys,
                                                              phys: Array(repeating: each, count: phys.nonzeroBitCount)))
        try await controller.send(LESetExtendedScanEnable(enable: true, filterDuplicates: filterDuplicates ? 1 : 0))
    }

    public static func stopExtended(_ controller: HCIController) async throws {
        try await controller.send(LESetExtendedScanEnable(enable: false))
    }
}

/// Joins the pieces of extended advertising reports (data status "incomplete, more
/// to come") per advertiser and set, and turns each whole report into an
/// `Advertisement`. A truncated report is delivered with what arrived and counted.
public struct ExtendedReportAssembler: Sendable {
    private struct Key: Hashable { var address: BluetoothAddress; var sid: UInt8; var scanResponse: Bool }
    private var partial: [Key: [UInt8]] = [:]
    /// Reports whose data the controller truncated.
    public private(set) var truncated = 0
    /// Most pieces kept at once (an advertiser that never completes cannot grow memory).
    public var capacity = 64

    public init() {}

    public mutating func add(_ r: LEExtendedAdvertisingReport.Report) -> Advertisement? {
        let status = (r.eventType >> 5) & 0x3
        let scanResponse = r.eventType & 0x08 != 0
        let key = Key(address: r.address, sid: r.advertisingSID, scanResponse: scanResponse)
        var data = (partial.removeValue(forKey: key) ?? []) + r.data
        switch status {
        case 1:
            if partial.count >= capacity { partial.removeAll() }
            partial[key] = data
            return nil
        case 0:
            break
        default:
            truncated += 1
            data = Array(data.prefix(1650))
        }
        return Advertisement(extended: r, data: data)
    }
}

extension Advertisement {
    /// An extended report as the legacy event types name it: 4 scan response, 0/1
    /// connectable (undirected/directed), 2 scannable, 3 neither.
    public init(extended r: LEExtendedAdvertisingReport.Report, data: [UInt8]) {
        let t = r.eventType
        let type: UInt8 = t & 0x08 != 0 ? 4 : (t & 0x01 != 0 ? (t & 0x04 != 0 ? 1 : 0) : (t & 0x02 != 0 ? 2 : 3))
        self.init(address: r.address, addressType: r.addressType, rssi: r.rssi, eventType: type, data: AdvertisingData(parsing: data), raw: data,
                  advertisingSID: r.advertisingSID <= 0x0F ? r.advertisingSID : nil,
                  periodicAdvertisingInterval: r.periodicAdvertisingInterval != 0 ? r.periodicAdvertisingInterval : nil,
                  primaryPHY: r.primaryPHY, secondaryPHY: r.secondaryPHY != 0 ? r.secondaryPHY : nil)
    }
}
