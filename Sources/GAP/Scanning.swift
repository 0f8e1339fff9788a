// Scanning and advertising (Core Specification v5.4, Vol 3, Part C, §9.1–§9.2;
// Vol 4, Part E, §7.8.5–§7.8.11), legacy PDUs. Extended advertising comes later.

import HCI

/// One received advertising or scan response PDU, decoded.
public struct Advertisement: Hashable, Sendable {
    public var address: BluetoothAddress
    public var addressType: AddressType
    public var rssi: Int8
    /// 0 ADV_IND, 1 ADV_DIRECT_IND, 2 ADV_SCAN_IND, 3 ADV_NONCONN_IND, 4 SCAN_RSP.
    public var eventType: UInt8
    public var data: AdvertisingData
    public var raw: [UInt8]
    /// An extended advertisement's Advertising_SID (nil: legacy PDUs, or none given).
    public var advertisingSID: UInt8?
    /// The interval of the periodic advertising the extended advertisement points to
    /// (its SyncInfo), in 1.25 ms units; nil when it points to none.
    public var periodicAdvertisingInterval: UInt16?
    /// The PHY of an extended report's primary advertising channel PDUs (1 LE 1M, 3 LE
    /// Coded); nil for a legacy report.
    public var primaryPHY: UInt8?
    /// The PHY of its auxiliary PDUs (1 LE 1M, 2 LE 2M, 3 LE Coded); nil when there are
    /// none (legacy PDUs, or a legacy report).
    public var secondaryPHY: UInt8?

    public init(address: BluetoothAddress, addressType: AddressType, rssi: Int8, eventType: UInt8, data: AdvertisingData, raw: [UInt8],
                advertisingSID: UInt8? = nil, periodicAdvertisingInterval: UInt16? = nil, primaryPHY: UInt8? = nil, secondaryPHY: UInt8? = nil) {
        self.address = address
        self.addressType = addressType
        self.rssi = rssi
        self.eventType = eventType
        self.data = data
        self.raw = raw
        self.advertisingSID = advertisingSID
        self.periodicAdvertisingInterval = periodicAdvertisingInterval
        self.primaryPHY = primaryPHY
        self.secondaryPHY = secondaryPHY
    }

    /// One report of an LE Advertising Report event, decoded.
    public init(_ r: LEAdvertisingReport.Report) {
        self.init(address: r.address, addressType: r.addressType, rssi: r.rssi, eventType: r.eventType, data: AdvertisingData(parsing: r.data), raw: r.data)
    }

    public var isScanResponse: Bool { eventType == 4 }
    public var isConnectable: Bool { eventType == 0 || eventType == 1 }
    /// Directed advertising (ADV_DIRECT_IND, or an extended PDU with TargetA): for this
    /// scanner alone, which may connect to it.
    public var isDirected: Bool { eventType == 1 }

    /// Distance from the advertised TX Power Level or an iBeacon's measured power, if either is present.
    public var estimatedMetres: Double? {
        if let b = data.iBeacon { return DistanceEstimate.metres(rssi: Double(rssi), rssiAtOneMetre: Double(b.measuredPower)) }
        if let tx = data.txPowerLevel { return DistanceEstimate.metres(rssi: Double(rssi), txPowerLevel: tx) }
        return nil
    }
}

public struct ScanFilter: Sendable, Hashable {
    public var names: [String] = []
    public var serviceUUIDs: [BluetoothUUID] = []
    public var addresses: [BluetoothAddress] = []
    public var minimumRSSI: Int8?
    public init(names: [String] = [], serviceUUIDs: [BluetoothUUID] = [], addresses: [BluetoothAddress] = [], minimumRSSI: Int8? = nil) {
        self.names = names
        self.serviceUUIDs = serviceUUIDs
        self.addresses = addresses
        self.minimumRSSI = minimumRSSI
    }

    /// Whether `a` passes every filter that is set. Scan responses carry no flags or
    /// UUIDs of their own, so name and UUID filters look at what the response has.
    public func matches(_ a: Advertisement) -> Bool {
        if let m = minimumRSSI, a.rssi < m { return false }
        if !addresses.isEmpty, !addresses.contains(a.address) { return false }
        if !names.isEmpty, !names.contains(where: { $0 == a.data.localName }) { return false }
        if !serviceUUIDs.isEmpty, a.data.serviceUUIDs.allSatisfy({ !serviceUUIDs.contains($0) }) { return false }
        return true
    }
}

public enum Scanner {
    /// Starts scanning; the stream yields matching advertisements until `stop` (or the
    /// transport ends). Buffer: the newest 256; `dropped` counts what was lost.
    /// Interval and window are in 0.625 ms units.
    public static func start(_ controller: HCIController, active: Bool = true, filterDuplicates: Bool = true,
                             filter: ScanFilter = ScanFilter(), interval: UInt16 = 0x0060, window: UInt16 = 0x0030) async throws -> BufferedStream<Advertisement> {
        let events = await controller.events()
        let (stream, cont) = BufferedStream<Advertisement>.makeStream(capacity: 256)
        let pump = Task {
            for await e in events {
                guard case let .le(.advertisingReport(r)) = e else { continue }
                for rp in r.reports {
                    let a = Advertisement(rp)
                    if filter.matches(a) { cont.yield(a) }
                }
            }
            cont.finish()
        }
        cont.onTermination = { _ in pump.cancel() }
        try await enable(controller, active: active, filterDuplicates: filterDuplicates, interval: interval, window: window)
        return stream
    }

    /// LE Set Scan Parameters and LE Set Scan Enable; the reports arrive as events.
    /// `ownAddressType` is what an active scan's requests carry (`.random`: the
    /// controller's random address, a private one under privacy). `filterPolicy`:
    /// Scanning_Filter_Policy (§7.8.10; 1: only devices on the Filter Accept List).
    public static func enable(_ controller: HCIController, active: Bool = true, filterDuplicates: Bool = true,
                              interval: UInt16 = 0x0060, window: UInt16 = 0x0030, ownAddressType: AddressType = .public,
                              filterPolicy: UInt8 = 0) async throws {
        try await controller.send(LESetScanParameters(scanType: active ? 1 : 0, scanInterval: interval, scanWindow: window,
                                                      ownAddressType: ownAddressType, scanningFilterPolicy: filterPolicy))
        try await controller.send(LESetScanEnable(scanEnable: true, filterDuplicates: filterDuplicates))
    }

    public static func stop(_ controller: HCIController) async throws {
        try await controller.send(LESetScanEnable(scanEnable: false))
    }
}

/// The one device directed advertising is for (Peer_Address of §7.8.5 and §7.8.53):
/// only it hears the advertisement, and only it may connect.
public struct DirectedTarget: Hashable, Sendable {
    public var address: BluetoothAddress
    /// Public or random (the device's identity type, or random for its private address).
    public var addressType: AddressType
    /// High duty cycle: as often as every 3.75 ms, for 1.28 s at most (for a fast
    /// reconnection); low duty cycle: at the advertising interval, until stopped.
    public var highDutyCycle: Bool
    public init(address: BluetoothAddress, addressType: AddressType = .public, highDutyCycle: Bool = false) {
        self.address = address
        self.addressType = addressType
        self.highDutyCycle = highDutyCycle
    }
}

public enum Advertiser {
    /// Starts legacy advertising. Throws `AdvertisingDataError.tooLong` (saying how much
    /// fits) before touching the controller when either payload exceeds 31 bytes.
    /// With `ownAddressType` `.random` the controller advertises from its random
    /// address; `randomAddress`, when given, is set first (LE Set Random Address, which
    /// the controller refuses while it scans or initiates: the caller knows when).
    /// `filterPolicy`: Advertising_Filter_Policy (bit 0 scan requests, bit 1 connection
    /// requests only from the Filter Accept List's devices). `directed`: connectable
    /// directed advertising (ADV_DIRECT_IND) to that device alone, which carries no
    /// data (the caller gives none); high duty cycle lasts 1.28 s at most (the
    /// controller then ends it with an LE Connection Complete of status Advertising
    /// Timeout), low duty cycle until stopped.
    public static func start(_ controller: HCIController, data: AdvertisingData, scanResponse: AdvertisingData? = nil,
                             connectable: Bool = true, intervalMilliseconds: Double = 100,
                             ownAddressType: AddressType = .public, randomAddress: BluetoothAddress? = nil, filterPolicy: UInt8 = 0,
                             directed: DirectedTarget? = nil) async throws {
        let adv = try data.encoded()
        let rsp = try scanResponse?.encoded() ?? []
        let units = UInt16(Swift.max(32, Swift.min(16384, intervalMilliseconds / 0.625)))
        // ADV_DIRECT_IND (1 high duty, 4 low duty) when directed; ADV_IND when connectable;
        // ADV_SCAN_IND when there is a scan response to give; else ADV_NONCONN_IND.
        let type: UInt8 = directed.map { $0.highDutyCycle ? 1 : 4 } ?? (connectable ? 0 : (rsp.isEmpty ? 3 : 2))
        _ = try? await controller.send(LESetAdvertisingEnable(advertisingEnable: false))
        if let randomAddress { try await controller.send(LESetRandomAddress(randomAddress: randomAddress)) }
        try await controller.send(LESetAdvertisingParameters(advertisingIntervalMin: units, advertisingIntervalMax: units, advertisingType: type,
                                                             ownAddressType: ownAddressType, peerAddressType: directed?.addressType ?? .public,
                                                             peerAddress: directed?.address ?? .zero, advertisingFilterPolicy: filterPolicy))
        try await controller.send(LESetAdvertisingData(data: adv))
        try await controller.send(LESetScanResponseData(data: rsp))
        try await controller.send(LESetAdvertisingEnable(advertisingEnable: true))
    }

    public static func stop(_ controller: HCIController) async throws {
        try await controller.send(LESetAdvertisingEnable(advertisingEnable: false))
    }
}
