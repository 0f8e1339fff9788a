// Advertising as a controller keeps it: extended advertising sets (Core Specification
// v5.4, Vol 4, Part E, §7.8.52–§7.8.60), with the status each command answers when
// the host asks for what the spec does not allow, and what goes on air (`AirAdvertisement`),
// from a set or from the legacy commands (§7.8.5–§7.8.9).
//
// A set advertises until it is disabled, removed, a central connects to it, or a
// limit of LE Set Extended Advertising Enable ends it (LE Advertising Set Terminated):
// its Duration, kept with the loop's clock (Advertising Timeout), or its
// Max_Extended_Advertising_Events (Limit Reached). Advertising events are what the
// radio models (see VirtualRadio): one when the set is enabled, one at every `tick()`.

import HCI

/// What one controller puts on air: its legacy advertising, or one enabled set.
struct AirAdvertisement: Sendable {
    var address: BluetoothAddress
    var addressType: AddressType
    /// Advertising_Event_Properties (§7.8.53): bit 0 connectable, 1 scannable,
    /// 2 directed, 3 high duty cycle, 4 legacy PDUs, 5 anonymous, 6 TxPower. The
    /// legacy commands' types are given as their legacy-PDU properties.
    var properties: UInt16
    /// Directed advertising: the only device that hears it and may connect.
    var target: BluetoothAddress?
    var data: [UInt8]
    var scanResponse: [UInt8]
    /// Advertising_SID (0xFF: none, the legacy commands).
    var sid: UInt8
    /// The PHY of the primary advertising channel PDUs (1 LE 1M, 3 LE Coded): only a
    /// scanner or initiator on that PHY hears them.
    var primaryPHY: UInt8 = 1
    /// The PHY of the auxiliary PDUs (0: none, legacy PDUs), where a link it makes runs.
    var secondaryPHY: UInt8 = 0
    var txPower: Int8
    /// The advertising set; nil for the legacy commands.
    var set: UInt8?
    /// The periodic train its AUX_ADV_IND points to (SyncInfo): its interval in
    /// 1.25 ms, 0 for none.
    var periodicInterval: UInt16 = 0
    /// Advertising_Filter_Policy (§7.8.5, §7.8.53) with the advertiser's Filter Accept
    /// List: bit 0, only its devices' scan requests are answered; bit 1, only they
    /// may connect.
    var filterPolicy: UInt8 = 0
    var acceptList: [VirtualController.FilterAcceptListEntry] = []

    var connectable: Bool { properties & 0x01 != 0 }
    var scannable: Bool { properties & 0x02 != 0 }
    var directed: Bool { properties & 0x04 != 0 }
    var legacyPDUs: Bool { properties & 0x10 != 0 }

    /// The legacy commands' Advertising_Type (§7.8.5) as event properties (Table 7.2
    /// of §7.8.53): ADV_IND, ADV_DIRECT_IND (high duty), ADV_SCAN_IND,
    /// ADV_NONCONN_IND, ADV_DIRECT_IND (low duty).
    static func properties(legacyType t: UInt8) -> UInt16? {
        switch t {
        case 0: return 0x13
        case 1: return 0x1D
        case 2: return 0x12
        case 3: return 0x10
        case 4: return 0x15
        default: return nil
        }
    }

    /// Whether a device at `address` hears it (directed advertising is for its target alone).
    func isHeard(by address: BluetoothAddress) -> Bool { target == nil || target == address }

    /// Whether an initiator at `address`, initiating on `phys` (Initiating_PHYs bits:
    /// 0 LE 1M, 1 LE 2M, 2 LE Coded), may connect: legacy LE Create Connection sees
    /// legacy PDUs only (LE 1M); LE Extended Create Connection sees both, on the primary
    /// PHYs it initiates on, and answers extended PDUs on their secondary PHY.
    func accepts(initiator address: BluetoothAddress, type: AddressType, extended: Bool, phys: UInt8) -> Bool {
        connectable && (extended || legacyPDUs) && phys & Self.bit(primaryPHY) != 0 && (legacyPDUs || phys & Self.bit(secondaryPHY) != 0)
            && isHeard(by: address) && (filterPolicy & 0x02 == 0 || listed(address, type))
    }

    /// A PHY's bit in Scanning_PHYs and Initiating_PHYs (LE 1M bit 0, LE 2M bit 1, LE Coded bit 2).
    static func bit(_ phy: UInt8) -> UInt8 { phy == 0 ? 0 : 1 << (phy - 1) }

    /// The PHY a link it makes runs on, each way: its auxiliary PDUs' (LE 1M for legacy PDUs).
    var linkPHY: UInt8 { legacyPDUs ? 1 : secondaryPHY }

    /// Whether a scanner at `address` gets the scan response to its scan request.
    func answersScanRequest(from address: BluetoothAddress, type: AddressType) -> Bool {
        scannable && (filterPolicy & 0x01 == 0 || listed(address, type))
    }

    private func listed(_ address: BluetoothAddress, _ type: AddressType) -> Bool {
        acceptList.contains(VirtualController.FilterAcceptListEntry(type: type.rawValue, address: address))
    }

    /// The LE Advertising Report Event_Type (§7.7.65.2): 0 ADV_IND, 1 ADV_DIRECT_IND,
    /// 2 ADV_SCAN_IND, 3 ADV_NONCONN_IND.
    var legacyReportType: UInt8 { directed ? 1 : connectable ? 0 : scannable ? 2 : 3 }

    /// The LE Extended Advertising Report Event_Type bits 0–4 (§7.7.65.13): a legacy
    /// PDU's fixed values, or the set's connectable, scannable and directed bits.
    var extendedReportType: UInt16 { legacyPDUs ? properties & 0x17 : properties & 0x07 }
}

/// A periodic advertising train on air (an advertising set's, §7.8.63).
struct PeriodicTrain: Sendable {
    var address: BluetoothAddress
    var addressType: AddressType
    var sid: UInt8
    /// In 1.25 ms units.
    var interval: UInt16
    var data: [UInt8]
    var txPower: Int8
}

/// A controller's extended advertising sets: parameters, data (whole or in
/// fragments), random address, enable; sans-I/O, each command answering its status.
struct AdvertisingSets {
    struct AdvertisingSet {
        var properties: UInt16
        var ownAddressType: AddressType
        var peerAddress: BluetoothAddress
        var sid: UInt8
        var primaryPHY: UInt8 = 1
        var secondaryPHY: UInt8
        var txPower: Int8
        var filterPolicy: UInt8 = 0
        var randomAddress: BluetoothAddress?
        var data: [UInt8] = []
        var scanResponse: [UInt8] = []
        /// Data given in fragments, the last not yet (§7.8.54, Operation 0 and 1).
        var partialData = false
        var partialScanResponse = false
        var enabled = false
        /// This enabling's limits (§7.8.56): Duration in 10 ms units, events (0: none).
        var duration: UInt16 = 0
        var maximumEvents: UInt8 = 0
        /// Advertising events sent since this enabling.
        var events = 0
        /// Which enabling this is: a Duration timer ends only the enabling that armed it.
        var run: UInt64 = 0
        /// Periodic advertising (§7.8.61–§7.8.63): the interval in 1.25 ms (0: not
        /// configured), its data, whether a fragment is pending, whether it is on.
        var periodicInterval: UInt16 = 0
        var periodicData: [UInt8] = []
        var partialPeriodicData = false
        var periodicEnabled = false

        var legacy: Bool { properties & 0x10 != 0 }
        var connectable: Bool { properties & 0x01 != 0 }
        var scannable: Bool { properties & 0x02 != 0 }
        var directed: Bool { properties & 0x04 != 0 }
    }

    /// What LE Read Number of Supported Advertising Sets says.
    static let capacity = 4
    /// What LE Read Maximum Advertising Data Length says: the most Host Advertising
    /// Data an extended set carries.
    static let maximumDataLength = LESetExtendedAdvertisingParameters.hostAdvertisingDataLimit
    static let legacyDataLength = LESetExtendedAdvertisingParameters.legacyDataLimit

    private(set) var sets: [UInt8: AdvertisingSet] = [:]
    private var runs: UInt64 = 0

    var anyEnabled: Bool { sets.values.contains { $0.enabled } }

    static func maximumDataLength(properties p: UInt16) -> Int {
        LESetExtendedAdvertisingParameters.maximumDataLength(properties: p)
    }

    /// LE Set Extended Advertising Parameters (§7.8.53): the selected TX power, or the status refusing it.
    mutating func setParameters(_ c: LESetExtendedAdvertisingParameters, defaultTxPower: Int8) -> Result<Int8, HCIStatus> {
        let p = c.advertisingEventProperties
        guard c.advertisingHandle <= 0xEF, c.primaryAdvertisingChannelMap & 0x07 != 0,
              c.primaryAdvertisingIntervalMin >= 0x20, c.primaryAdvertisingIntervalMax >= c.primaryAdvertisingIntervalMin,
              c.ownAddressType.rawValue <= 3, c.advertisingFilterPolicy <= 3, Self.validProperties(p),
              // Primary LE 1M or LE Coded; secondary LE 1M, 2M or Coded; legacy PDUs on LE 1M alone.
              c.primaryAdvertisingPHY == 1 || c.primaryAdvertisingPHY == 3, (1...3).contains(c.secondaryAdvertisingPHY),
              p & 0x10 == 0 || c.primaryAdvertisingPHY == 1
        else { return .failure(.invalidCommandParameters) }
        if let s = sets[c.advertisingHandle] {
            guard !s.enabled else { return .failure(.commandDisallowed) }
            // A set with periodic advertising on stays neither connectable, scannable, legacy nor anonymous.
            guard !s.periodicEnabled || p & 0x33 == 0 else { return .failure(.invalidCommandParameters) }
            // Data already in the set must suit the new type.
            guard s.data.count <= Self.maximumDataLength(properties: p), s.scanResponse.isEmpty || p & 0x02 != 0,
                  p & 0x10 == 0 || s.scanResponse.count <= Self.legacyDataLength
            else { return .failure(.invalidCommandParameters) }
        } else if sets.count >= Self.capacity {
            return .failure(.memoryCapacityExceeded)
        }
        let power = c.advertisingTxPower == 0x7F ? defaultTxPower : Swift.max(-127, Swift.min(20, c.advertisingTxPower))
        var s = sets[c.advertisingHandle] ?? AdvertisingSet(properties: p, ownAddressType: c.ownAddressType, peerAddress: c.peerAddress,
                                                           sid: c.advertisingSID, secondaryPHY: c.secondaryAdvertisingPHY, txPower: power)
        s.properties = p
        s.ownAddressType = c.ownAddressType
        s.peerAddress = c.peerAddress
        s.sid = c.advertisingSID
        s.primaryPHY = c.primaryAdvertisingPHY
        s.secondaryPHY = c.secondaryAdvertisingPHY
        s.txPower = power
        s.filterPolicy = c.advertisingFilterPolicy
        sets[c.advertisingHandle] = s
        return .success(power)
    }

    /// Table 7.2's legacy combinations, and for extended PDUs: not both connectable
    /// and scannable, no high duty cycle, anonymous neither connectable nor scannable.
    /// SID at most 0x0F is the caller's; reserved bits refused.
    static func validProperties(_ p: UInt16) -> Bool {
        guard p & ~0x7F == 0 else { return false }
        if p & 0x10 != 0 { return [0x13, 0x15, 0x1D, 0x12, 0x10].contains(p) }
        if p & 0x03 == 0x03 || p & 0x08 != 0 { return false }
        if p & 0x20 != 0, p & 0x03 != 0 { return false }
        return true
    }

    /// LE Set Advertising Set Random Address (§7.8.52).
    mutating func setRandomAddress(_ handle: UInt8, _ address: BluetoothAddress) -> HCIStatus {
        guard sets[handle] != nil else { return .unknownAdvertisingIdentifier }
        sets[handle]?.randomAddress = address
        return .success
    }

    /// LE Set Extended Advertising Data (§7.8.54) or Scan Response Data (§7.8.55).
    mutating func setData(_ c: some LEExtendedAdvertisingPayloadCommand, scanResponse: Bool) -> HCIStatus {
        guard var s = sets[c.advertisingHandle] else { return .unknownAdvertisingIdentifier }
        let op = c.operation, n = c.data.count
        guard op <= 4 else { return .invalidCommandParameters }
        if scanResponse {
            // A non-scannable set takes only an empty complete operation (discarding data).
            guard s.scannable || (op == 3 && n == 0) else { return .invalidCommandParameters }
            guard op != 4 else { return .invalidCommandParameters }
        } else {
            guard Self.maximumDataLength(properties: s.properties) > 0 || (op == 3 && n == 0) else { return .invalidCommandParameters }
            if op == 4, !s.enabled || s.data.isEmpty || s.legacy || n != 0 { return .invalidCommandParameters }
        }
        if s.legacy, op != 3 || n > Self.legacyDataLength { return .invalidCommandParameters }
        if op < 3, n == 0 { return .invalidCommandParameters }
        if s.enabled, op < 3 { return .commandDisallowed }
        if scanResponse, s.enabled, s.scannable, !s.legacy, n == 0 { return .commandDisallowed }

        var (stored, partial) = scanResponse ? (s.scanResponse, s.partialScanResponse) : (s.data, s.partialData)
        switch op {
        case 0: stored += c.data; partial = true
        case 1: stored = c.data; partial = true
        case 2: stored += c.data; partial = false
        case 3: stored = c.data; partial = false
        default: break  // 4: unchanged data (a new Advertising DID on air)
        }
        var status = HCIStatus.success
        if stored.count > Self.maximumDataLength {
            // All the data is discarded.
            (stored, partial, status) = ([], false, .memoryCapacityExceeded)
        } else if s.enabled, !s.legacy, !scanResponse, stored.count > Self.maximumDataLength(properties: s.properties) {
            (stored, partial, status) = ([], false, .packetTooLong)
        }
        if scanResponse { (s.scanResponse, s.partialScanResponse) = (stored, partial) } else { (s.data, s.partialData) = (stored, partial) }
        sets[c.advertisingHandle] = s
        return status
    }

    /// LE Set Extended Advertising Enable (§7.8.56): checks every set before
    /// enabling any. Returns the status and the sets that started advertising.
    mutating func enable(_ c: LESetExtendedAdvertisingEnable) -> (HCIStatus, started: [UInt8]) {
        var seen = Set<UInt8>()
        for e in c.sets {
            guard seen.insert(e.advertisingHandle).inserted else { return (.invalidCommandParameters, []) }
            guard sets[e.advertisingHandle] != nil else { return (.unknownAdvertisingIdentifier, []) }
        }
        guard c.enable else {
            for h in c.sets.isEmpty ? Array(sets.keys) : c.sets.map(\.advertisingHandle) { sets[h]?.enabled = false }
            return (.success, [])
        }
        guard !c.sets.isEmpty else { return (.invalidCommandParameters, []) }
        for e in c.sets {
            guard let s = sets[e.advertisingHandle] else { continue }
            // High duty cycle directed advertising lasts at most 1.28 s, and not "until disabled".
            if s.properties & 0x0D == 0x0D, e.duration == 0 || e.duration > 128 { return (.invalidCommandParameters, []) }
            if s.partialData || s.partialScanResponse { return (.commandDisallowed, []) }
            if !s.legacy, s.scannable, s.scanResponse.isEmpty { return (.commandDisallowed, []) }
            if !s.legacy, s.connectable, s.data.count > Self.maximumDataLength(properties: s.properties) { return (.invalidCommandParameters, []) }
            // Random own address (or resolvable falling back to it, with no resolving list here) needs the set's address.
            if s.ownAddressType.rawValue & 1 == 1, s.randomAddress == nil { return (.invalidCommandParameters, []) }
        }
        var started: [UInt8] = []
        for e in c.sets {
            guard var s = sets[e.advertisingHandle] else { continue }
            if !s.enabled { started.append(e.advertisingHandle) }
            // Enabling an enabled set again restarts its Duration and event count with the new values.
            runs += 1
            (s.enabled, s.duration, s.maximumEvents, s.events, s.run) = (true, e.duration, e.maxExtendedAdvertisingEvents, 0, runs)
            sets[e.advertisingHandle] = s
        }
        return (.success, started)
    }

    /// One advertising event of each set in `handles` that is enabled: the sets that
    /// reached their Max_Extended_Advertising_Events stop, returned with their count.
    mutating func advertisingEvent(_ handles: [UInt8]) -> [(handle: UInt8, events: Int)] {
        var ended: [(UInt8, Int)] = []
        for h in handles {
            guard var s = sets[h], s.enabled else { continue }
            s.events += 1
            if s.maximumEvents != 0, s.events >= Int(s.maximumEvents) {
                s.enabled = false
                ended.append((h, s.events))
            }
            sets[h] = s
        }
        return ended
    }

    /// The handles of the enabled sets.
    var enabledHandles: [UInt8] { sets.keys.sorted().filter { sets[$0]?.enabled == true } }

    /// Enabling `run` of set `handle` reached its Duration: it stops, if still that
    /// enabling. Returns the Num_Completed_Extended_Advertising_Events to report (the
    /// count when a maximum was set, else 0, §7.7.65.18), or nil when nothing ended.
    mutating func durationElapsed(_ handle: UInt8, run: UInt64) -> Int? {
        guard var s = sets[handle], s.enabled, s.run == run else { return nil }
        s.enabled = false
        sets[handle] = s
        return s.maximumEvents != 0 ? s.events : 0
    }

    /// LE Remove Advertising Set (§7.8.59): not while its advertising or periodic advertising is on.
    mutating func remove(_ handle: UInt8) -> HCIStatus {
        guard let s = sets[handle] else { return .unknownAdvertisingIdentifier }
        guard !s.enabled, !s.periodicEnabled else { return .commandDisallowed }
        sets[handle] = nil
        return .success
    }

    /// LE Clear Advertising Sets (§7.8.60).
    mutating func clear() -> HCIStatus {
        guard !anyEnabled, !sets.values.contains(where: \.periodicEnabled) else { return .commandDisallowed }
        sets.removeAll()
        return .success
    }

    // MARK: Periodic advertising

    /// A set that may carry periodic advertising: extended PDUs, neither connectable,
    /// scannable nor anonymous (§7.8.61).
    static func allowsPeriodic(_ s: AdvertisingSet) -> Bool { s.properties & 0x33 == 0 }

    /// LE Set Periodic Advertising Parameters (§7.8.61).
    mutating func setPeriodicParameters(_ c: LESetPeriodicAdvertisingParameters) -> HCIStatus {
        guard var s = sets[c.advertisingHandle] else { return .unknownAdvertisingIdentifier }
        guard c.periodicAdvertisingIntervalMin >= 6, c.periodicAdvertisingIntervalMax >= c.periodicAdvertisingIntervalMin,
              Self.allowsPeriodic(s) else { return .invalidCommandParameters }
        guard !s.periodicEnabled else { return .commandDisallowed }
        s.periodicInterval = c.periodicAdvertisingIntervalMax
        sets[c.advertisingHandle] = s
        return .success
    }

    /// LE Set Periodic Advertising Data (§7.8.62): while on, only whole data (or
    /// "unchanged"); more than the set holds discards it all.
    mutating func setPeriodicData(_ c: LESetPeriodicAdvertisingData) -> HCIStatus {
        guard var s = sets[c.advertisingHandle] else { return .unknownAdvertisingIdentifier }
        guard s.periodicInterval != 0 else { return .commandDisallowed }
        let op = c.operation
        guard op <= 4 else { return .invalidCommandParameters }
        if s.periodicEnabled, op < 3 { return .commandDisallowed }
        if op < 3, c.data.isEmpty { return .invalidCommandParameters }
        if op == 4, !s.periodicEnabled || s.periodicData.isEmpty || !c.data.isEmpty { return .invalidCommandParameters }
        switch op {
        case 0: s.periodicData += c.data; s.partialPeriodicData = true
        case 1: s.periodicData = c.data; s.partialPeriodicData = true
        case 2: s.periodicData += c.data; s.partialPeriodicData = false
        case 3: s.periodicData = c.data; s.partialPeriodicData = false
        default: break
        }
        var status = HCIStatus.success
        if s.periodicData.count > Self.maximumDataLength {
            (s.periodicData, s.partialPeriodicData, status) = ([], false, .memoryCapacityExceeded)
        }
        sets[c.advertisingHandle] = s
        return status
    }

    /// LE Set Periodic Advertising Enable (§7.8.63): on needs the parameters, whole
    /// data and a set that allows it; off always succeeds. Returns the status and
    /// whether a train stopped (scanners synchronised to it lose it).
    mutating func setPeriodicEnable(_ c: LESetPeriodicAdvertisingEnable) -> (HCIStatus, stopped: Bool) {
        guard var s = sets[c.advertisingHandle] else { return (.unknownAdvertisingIdentifier, false) }
        guard c.enable & 0x01 != 0 else {
            let was = s.periodicEnabled
            s.periodicEnabled = false
            sets[c.advertisingHandle] = s
            return (.success, was)
        }
        guard !s.partialPeriodicData, s.periodicInterval != 0, Self.allowsPeriodic(s) else { return (.commandDisallowed, false) }
        // No Periodic Advertising ADI Support here.
        guard c.enable & 0x02 == 0 else { return (.unsupportedFeatureOrParameterValue, false) }
        s.periodicEnabled = true
        sets[c.advertisingHandle] = s
        return (.success, false)
    }

    /// The periodic trains on air, in handle order: a train is heard by a scanner
    /// synchronised to it whether or not its set's extended advertising is on.
    func periodicTrains(publicAddress: BluetoothAddress) -> [PeriodicTrain] {
        sets.keys.sorted().compactMap { h in
            guard let s = sets[h], s.periodicEnabled else { return nil }
            let random = s.ownAddressType.rawValue & 1 == 1
            return PeriodicTrain(address: random ? s.randomAddress ?? .zero : publicAddress, addressType: random ? .random : .public,
                                 sid: s.sid & 0x0F, interval: s.periodicInterval, data: s.periodicData, txPower: s.txPower)
        }
    }

    /// A central connected to `handle`'s advertising: the set stops.
    mutating func connected(_ handle: UInt8) { sets[handle]?.enabled = false }

    mutating func reset() { sets.removeAll() }

    /// Whether an enabled set uses the Filter Accept List (its Advertising_Filter_Policy).
    var usesAcceptList: Bool { sets.values.contains { $0.enabled && $0.filterPolicy != 0 } }

    /// Whether any set has periodic advertising on.
    var anyPeriodic: Bool { sets.values.contains { $0.periodicEnabled } }

    /// The enabled sets as they go on air, in handle order (the same every run).
    func broadcasts(publicAddress: BluetoothAddress, acceptList: [VirtualController.FilterAcceptListEntry]) -> [AirAdvertisement] {
        sets.keys.sorted().compactMap { h in
            guard let s = sets[h], s.enabled else { return nil }
            let random = s.ownAddressType.rawValue & 1 == 1
            return AirAdvertisement(address: random ? s.randomAddress ?? .zero : publicAddress, addressType: random ? .random : .public,
                             properties: s.properties, target: s.directed ? s.peerAddress : nil, data: s.data,
                             scanResponse: s.scanResponse, sid: s.legacy ? 0xFF : s.sid & 0x0F,
                             primaryPHY: s.legacy ? 1 : s.primaryPHY, secondaryPHY: s.legacy ? 0 : s.secondaryPHY, txPower: s.txPower, set: h,
                             periodicInterval: s.periodicEnabled ? s.periodicInterval : 0, filterPolicy: s.filterPolicy,
                             acceptList: s.filterPolicy == 0 ? [] : acceptList)
        }
    }
}
