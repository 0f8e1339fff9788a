// LE extended advertising and extended scanning commands (Core Specification v5.4,
// Vol 4, Part E, §7.8.52–§7.8.66).

/// LE Set Advertising Set Random Address (§7.8.52).
public struct LESetAdvertisingSetRandomAddress: HCICommand {
    public static let opcode = HCIOpcode.leSetAdvertisingSetRandomAddress
    public var advertisingHandle: UInt8
    public var randomAddress: BluetoothAddress
    public init(advertisingHandle: UInt8, randomAddress: BluetoothAddress) {
        self.advertisingHandle = advertisingHandle
        self.randomAddress = randomAddress
    }
    public func encodeParameters(into w: inout ByteWriter) { w.write(advertisingHandle); randomAddress.encode(into: &w) }
    public init(parameters r: inout ByteReader) throws {
        advertisingHandle = try r.readUInt8("Advertising_Handle")
        randomAddress = try BluetoothAddress(from: &r)
    }
}

/// LE Set Extended Advertising Parameters [v1] (§7.8.53). Intervals in 0.625 ms (24-bit).
public struct LESetExtendedAdvertisingParameters: HCICommand {
    public typealias ReturnParameters = HCIOctetReturn  // Selected_TX_Power (signed)
    public static let opcode = HCIOpcode.leSetExtendedAdvertisingParameters
    /// Advertising_Event_Properties bits: 0 connectable, 1 scannable, 2 directed,
    /// 3 high duty directed, 4 legacy PDUs, 5 anonymous, 6 include TxPower.
    public var advertisingHandle: UInt8
    public var advertisingEventProperties: UInt16
    public var primaryAdvertisingIntervalMin: UInt32
    public var primaryAdvertisingIntervalMax: UInt32
    public var primaryAdvertisingChannelMap: UInt8
    public var ownAddressType: AddressType
    public var peerAddressType: AddressType
    public var peerAddress: BluetoothAddress
    public var advertisingFilterPolicy: UInt8
    public var advertisingTxPower: Int8
    public var primaryAdvertisingPHY: UInt8
    public var secondaryAdvertisingMaxSkip: UInt8
    public var secondaryAdvertisingPHY: UInt8
    public var advertisingSID: UInt8
    public var scanRequestNotificationEnable: UInt8
    public init(advertisingHandle: UInt8 = 0, advertisingEventProperties: UInt16 = 0x0001,
                primaryAdvertisingIntervalMin: UInt32 = 0x0800, primaryAdvertisingIntervalMax: UInt32 = 0x0800,
                primaryAdvertisingChannelMap: UInt8 = 0x07, ownAddressType: AddressType = .public,
                peerAddressType: AddressType = .public, peerAddress: BluetoothAddress = .zero,
                advertisingFilterPolicy: UInt8 = 0, advertisingTxPower: Int8 = 0x7F, primaryAdvertisingPHY: UInt8 = 1,
                secondaryAdvertisingMaxSkip: UInt8 = 0, secondaryAdvertisingPHY: UInt8 = 1, advertisingSID: UInt8 = 0,
                scanRequestNotificationEnable: UInt8 = 0) {
        self.advertisingHandle = advertisingHandle
        self.advertisingEventProperties = advertisingEventProperties
        self.primaryAdvertisingIntervalMin = primaryAdvertisingIntervalMin
        self.primaryAdvertisingIntervalMax = primaryAdvertisingIntervalMax
        self.primaryAdvertisingChannelMap = primaryAdvertisingChannelMap
        self.ownAddressType = ownAddressType
        self.peerAddressType = peerAddressType
        self.peerAddress = peerAddress
        self.advertisingFilterPolicy = advertisingFilterPolicy
        self.advertisingTxPower = advertisingTxPower
        self.primaryAdvertisingPHY = primaryAdvertisingPHY
        self.secondaryAdvertisingMaxSkip = secondaryAdvertisingMaxSkip
        self.secondaryAdvertisingPHY = secondaryAdvertisingPHY
        self.advertisingSID = advertisingSID
        self.scanRequestNotificationEnable = scanRequestNotificationEnable
    }
    public func encodeParameters(into w: inout ByteWriter) {
        w.write(advertisingHandle); w.write(advertisingEventProperties)
        w.writeUInt24(primaryAdvertisingIntervalMin); w.writeUInt24(primaryAdvertisingIntervalMax)
        w.write(primaryAdvertisingChannelMap); w.write(ownAddressType.rawValue); w.write(peerAddressType.rawValue)
        peerAddress.encode(into: &w); w.write(advertisingFilterPolicy); w.write(advertisingTxPower)
        w.write(primaryAdvertisingPHY); w.write(secondaryAdvertisingMaxSkip); w.write(secondaryAdvertisingPHY)
        w.write(advertisingSID); w.write(scanRequestNotificationEnable)
    }
    public init(parameters r: inout ByteReader) throws {
        advertisingHandle = try r.readUInt8("Advertising_Handle")
        advertisingEventProperties = try r.readUInt16("Advertising_Event_Properties")
        primaryAdvertisingIntervalMin = try r.readUInt24("Primary_Advertising_Interval_Min")
        primaryAdvertisingIntervalMax = try r.readUInt24("Primary_Advertising_Interval_Max")
        primaryAdvertisingChannelMap = try r.readUInt8("Primary_Advertising_Channel_Map")
        ownAddressType = AddressType(rawValue: try r.readUInt8("Own_Address_Type"))
        peerAddressType = AddressType(rawValue: try r.readUInt8("Peer_Address_Type"))
        peerAddress = try BluetoothAddress(from: &r)
        advertisingFilterPolicy = try r.readUInt8("Advertising_Filter_Policy")
        advertisingTxPower = try r.readInt8("Advertising_TX_Power")
        primaryAdvertisingPHY = try r.readUInt8("Primary_Advertising_PHY")
        secondaryAdvertisingMaxSkip = try r.readUInt8("Secondary_Advertising_Max_Skip")
        secondaryAdvertisingPHY = try r.readUInt8("Secondary_Advertising_PHY")
        advertisingSID = try r.readUInt8("Advertising_SID")
        scanRequestNotificationEnable = try r.readUInt8("Scan_Request_Notification_Enable")
    }
}

extension LESetExtendedAdvertisingParameters {
    /// The most Host Advertising Data an advertising set carries (Vol 6, Part B, §2.3.4.9).
    public static let hostAdvertisingDataLimit = 1650
    /// What one legacy advertising PDU carries.
    public static let legacyDataLimit = 31

    /// The most advertising data a set with these Advertising_Event_Properties
    /// carries: none for legacy directed and for scannable extended PDUs; 31 for other
    /// legacy PDUs; for connectable extended advertising what one AUX_ADV_IND holds (it
    /// cannot be chained: 254 octets less AdvA, ADI, TargetA when directed and TxPower
    /// when included, Vol 6, Part B, §2.3.4; a controller refuses more, §7.8.56);
    /// otherwise `hostAdvertisingDataLimit`.
    public static func maximumDataLength(properties p: UInt16) -> Int {
        let legacy = p & 0x10 != 0, connectable = p & 0x01 != 0, scannable = p & 0x02 != 0, directed = p & 0x04 != 0
        if legacy { return directed ? 0 : legacyDataLimit }
        if scannable { return 0 }
        if !connectable { return hostAdvertisingDataLimit }
        return 254 - 6 - 2 - (directed ? 6 : 0) - (p & 0x40 != 0 ? 1 : 0)
    }
}

/// The shared shape of LE Set Extended Advertising Data and LE Set Extended Scan
/// Response Data: handle, operation, fragment preference, length, data (≤ 251).
public protocol LEExtendedAdvertisingPayloadCommand: HCICommand {
    var advertisingHandle: UInt8 { get }
    /// 0 intermediate, 1 first, 2 last, 3 complete, 4 unchanged data.
    var operation: UInt8 { get }
    var fragmentPreference: UInt8 { get }
    var data: [UInt8] { get }
    init(advertisingHandle: UInt8, operation: UInt8, fragmentPreference: UInt8, data: [UInt8])
}

extension LEExtendedAdvertisingPayloadCommand {
    /// Largest data one command carries (the parameter length is one octet).
    public static var maximumFragmentLength: Int { 251 }
    public func encodeParameters(into w: inout ByteWriter) {
        w.write(advertisingHandle); w.write(operation); w.write(fragmentPreference)
        let d = data.prefix(Self.maximumFragmentLength)
        w.write(UInt8(d.count)); w.write(contentsOf: d)
    }
    public init(parameters r: inout ByteReader) throws {
        let h = try r.readUInt8("Advertising_Handle")
        let op = try r.readUInt8("Operation")
        let fp = try r.readUInt8("Fragment_Preference")
        let n = Int(try r.readUInt8("Advertising_Data_Length"))
        self.init(advertisingHandle: h, operation: op, fragmentPreference: fp, data: try r.readBytes(n, "Advertising_Data"))
    }
}

/// LE Set Extended Advertising Data (§7.8.54).
public struct LESetExtendedAdvertisingData: LEExtendedAdvertisingPayloadCommand {
    public static let opcode = HCIOpcode.leSetExtendedAdvertisingData
    public var advertisingHandle: UInt8
    public var operation: UInt8
    public var fragmentPreference: UInt8
    public var data: [UInt8]
    public init(advertisingHandle: UInt8 = 0, operation: UInt8 = 3, fragmentPreference: UInt8 = 1, data: [UInt8]) {
        self.advertisingHandle = advertisingHandle
        self.operation = operation
        self.fragmentPreference = fragmentPreference
        self.data = data
    }
}

/// LE Set Extended Scan Response Data (§7.8.55).
public struct LESetExtendedScanResponseData: LEExtendedAdvertisingPayloadCommand {
    public static let opcode = HCIOpcode.leSetExtendedScanResponseData
    public var advertisingHandle: UInt8
    public var operation: UInt8
    public var fragmentPreference: UInt8
    public var data: [UInt8]
    public init(advertisingHandle: UInt8 = 0, operation: UInt8 = 3, fragmentPreference: UInt8 = 1, data: [UInt8]) {
        self.advertisingHandle = advertisingHandle
        self.operation = operation
        self.fragmentPreference = fragmentPreference
        self.data = data
    }
}

/// LE Set Extended Advertising Enable (§7.8.56).
public struct LESetExtendedAdvertisingEnable: HCICommand {
    public static let opcode = HCIOpcode.leSetExtendedAdvertisingEnable
    public struct AdvertisingSet: Hashable, Sendable {
        public var advertisingHandle: UInt8
        /// In 10 ms units; 0 = until disabled.
        public var duration: UInt16
        public var maxExtendedAdvertisingEvents: UInt8
        public init(advertisingHandle: UInt8, duration: UInt16 = 0, maxExtendedAdvertisingEvents: UInt8 = 0) {
            self.advertisingHandle = advertisingHandle
            self.duration = duration
            self.maxExtendedAdvertisingEvents = maxExtendedAdvertisingEvents
        }
    }
    public var enable: Bool
    public var sets: [AdvertisingSet]
    public init(enable: Bool, sets: [AdvertisingSet]) {
        self.enable = enable
        self.sets = sets
    }
    public func encodeParameters(into w: inout ByteWriter) {
        w.write(UInt8(enable ? 1 : 0)); w.write(UInt8(truncatingIfNeeded: sets.count))
        for s in sets { w.write(s.advertisingHandle); w.write(s.duration); w.write(s.maxExtendedAdvertisingEvents) }
    }
    public init(parameters r: inout ByteReader) throws {
        enable = try r.readUInt8("Enable") != 0
        let n = Int(try r.readUInt8("Num_Sets"))
        var sets: [AdvertisingSet] = []
        for _ in 0..<n {
            sets.append(AdvertisingSet(
                advertisingHandle: try r.readUInt8("Advertising_Handle"), duration: try r.readUInt16("Duration"),
                maxExtendedAdvertisingEvents: try r.readUInt8("Max_Extended_Advertising_Events")))
        }
        self.sets = sets
    }
}

/// LE Read Maximum Advertising Data Length (§7.8.57).
public struct LEReadMaximumAdvertisingDataLength: HCIParameterlessCommand {
    public static let opcode = HCIOpcode.leReadMaximumAdvertisingDataLength
    public init() {}
    public struct ReturnParameters: HCIReturnParameters {
        public var maxAdvertisingDataLength: UInt16
        public init(maxAdvertisingDataLength: UInt16) { self.maxAdvertisingDataLength = maxAdvertisingDataLength }
        public init(returnParameters r: inout ByteReader) throws {
            maxAdvertisingDataLength = try r.readUInt16("Max_Advertising_Data_Length")
        }
        public func encode(into w: inout ByteWriter) { w.write(maxAdvertisingDataLength) }
    }
}

/// LE Read Number of Supported Advertising Sets (§7.8.58).
public struct LEReadNumberOfSupportedAdvertisingSets: HCIParameterlessCommand {
    public typealias ReturnParameters = HCIOctetReturn
    public static let opcode = HCIOpcode.leReadNumberOfSupportedAdvertisingSets
    public init() {}
}

/// LE Remove Advertising Set (§7.8.59).
public struct LERemoveAdvertisingSet: HCICommand {
    public static let opcode = HCIOpcode.leRemoveAdvertisingSet
    public var advertisingHandle: UInt8
    public init(advertisingHandle: UInt8) { self.advertisingHandle = advertisingHandle }
    public func encodeParameters(into w: inout ByteWriter) { w.write(advertisingHandle) }
    public init(parameters r: inout ByteReader) throws { advertisingHandle = try r.readUInt8("Advertising_Handle") }
}

/// LE Clear Advertising Sets (§7.8.60).
public struct LEClearAdvertisingSets: HCIParameterlessCommand {
    public static let opcode = HCIOpcode.leClearAdvertisingSets
    public init() {}
}

/// Per-PHY scan parameters of LE Set Extended Scan Parameters.
public struct LEExtendedScanPHYParameters: Hashable, Sendable {
    public var scanType: UInt8
    public var scanInterval: UInt16
    public var scanWindow: UInt16
    public init(scanType: UInt8 = 1, scanInterval: UInt16 = 0x0010, scanWindow: UInt16 = 0x0010) {
        self.scanType = scanType
        self.scanInterval = scanInterval
        self.scanWindow = scanWindow
    }
}

/// LE Set Extended Scan Parameters (§7.8.64). One parameter block per bit set in
/// Scanning_PHYs (bit 0 LE 1M, bit 2 LE Coded), in bit order.
public struct LESetExtendedScanParameters: HCICommand {
    public static let opcode = HCIOpcode.leSetExtendedScanParameters
    public var ownAddressType: AddressType
    public var scanningFilterPolicy: UInt8
    public var scanningPHYs: UInt8
    public var phys: [LEExtendedScanPHYParameters]
    public init(ownAddressType: AddressType = .public, scanningFilterPolicy: UInt8 = 0, scanningPHYs: UInt8 = 0x01,
                phys: [LEExtendedScanPHYParameters] = [LEExtendedScanPHYParameters()]) {
        self.ownAddressType = ownAddressType
        self.scanningFilterPolicy = scanningFilterPolicy
        self.scanningPHYs = scanningPHYs
        self.phys = phys
    }
    public func encodeParameters(into w: inout ByteWriter) {
        w.write(ownAddressType.rawValue); w.write(scanningFilterPolicy); w.write(scanningPHYs)
        for p in phys { w.write(p.scanType); w.write(p.scanInterval); w.write(p.scanWindow) }
    }
    public init(parameters r: inout ByteReader) throws {
        ownAddressType = AddressType(rawValue: try r.readUInt8("Own_Address_Type"))
        scanningFilterPolicy = try r.readUInt8("Scanning_Filter_Policy")
        scanningPHYs = try r.readUInt8("Scanning_PHYs")
        var phys: [LEExtendedScanPHYParameters] = []
        for _ in 0..<scanningPHYs.nonzeroBitCount {
            phys.append(LEExtendedScanPHYParameters(
                scanType: try r.readUInt8("Scan_Type"), scanInterval: try r.readUInt16("Scan_Interval"),
                scanWindow: try r.readUInt16("Scan_Window")))
        }
        self.phys = phys
    }
}

/// LE Set Extended Scan Enable (§7.8.65).
public struct LESetExtendedScanEnable: HCICommand {
    public static let opcode = HCIOpcode.leSetExtendedScanEnable
    public var enable: Bool
    /// 0 off, 1 on, 2 on and reset each period.
    public var filterDuplicates: UInt8
    /// In 10 ms units; 0 = until disabled.
    public var duration: UInt16
    /// In 1.28 s units; 0 = continuous.
    public var period: UInt16
    public init(enable: Bool, filterDuplicates: UInt8 = 0, duration: UInt16 = 0, period: UInt16 = 0) {
        self.enable = enable
        self.filterDuplicates = filterDuplicates
        self.duration = duration
        self.period = period
    }
    public func encodeParameters(into w: inout ByteWriter) {
        w.write(UInt8(enable ? 1 : 0)); w.write(filterDuplicates); w.write(duration); w.write(period)
    }
    public init(parameters r: inout ByteReader) throws {
        enable = try r.readUInt8("Enable") != 0
        filterDuplicates = try r.readUInt8("Filter_Duplicates")
        duration = try r.readUInt16("Duration")
        period = try r.readUInt16("Period")
    }
}

/// LE Extended Create Connection [v1] (§7.8.66). One block of scan and connection
/// parameters per bit in Initiating_PHYs (bit 0 1M, bit 1 2M, bit 2 Coded).
public struct LEExtendedCreateConnection: HCICommand {
    public static let opcode = HCIOpcode.leExtendedCreateConnection
    public static let completesWithStatus = true
    public struct PHYParameters: Hashable, Sendable {
        public var scanInterval: UInt16
        public var scanWindow: UInt16
        public var connection: LEConnectionParameters
        public init(scanInterval: UInt16 = 0x0060, scanWindow: UInt16 = 0x0060, connection: LEConnectionParameters = LEConnectionParameters()) {
            self.scanInterval = scanInterval
            self.scanWindow = scanWindow
            self.connection = connection
        }
    }
    public var initiatorFilterPolicy: UInt8
    public var ownAddressType: AddressType
    public var peerAddressType: AddressType
    public var peerAddress: BluetoothAddress
    public var initiatingPHYs: UInt8
    public var phys: [PHYParameters]
    public init(initiatorFilterPolicy: UInt8 = 0, ownAddressType: AddressType = .public, peerAddressType: AddressType,
                peerAddress: BluetoothAddress, initiatingPHYs: UInt8 = 0x01, phys: [PHYParameters] = [PHYParameters()]) {
        self.initiatorFilterPolicy = initiatorFilterPolicy
        self.ownAddressType = ownAddressType
        self.peerAddressType = peerAddressType
        self.peerAddress = peerAddress
        self.initiatingPHYs = initiatingPHYs
        self.phys = phys
    }
    public func encodeParameters(into w: inout ByteWriter) {
        w.write(initiatorFilterPolicy); w.write(ownAddressType.rawValue); w.write(peerAddressType.rawValue)
        peerAddress.encode(into: &w); w.write(initiatingPHYs)
        for p in phys { w.write(p.scanInterval); w.write(p.scanWindow); p.connection.encode(into: &w) }
    }
    public init(parameters r: inout ByteReader) throws {
        initiatorFilterPolicy = try r.readUInt8("Initiator_Filter_Policy")
        ownAddressType = AddressType(rawValue: try r.readUInt8("Own_Address_Type"))
        peerAddressType = AddressType(rawValue: try r.readUInt8("Peer_Address_Type"))
        peerAddress = try BluetoothAddress(from: &r)
        initiatingPHYs = try r.readUInt8("Initiating_PHYs")
        var phys: [PHYParameters] = []
        for _ in 0..<initiatingPHYs.nonzeroBitCount {
            let si = try r.readUInt16("Scan_Interval")
            let sw = try r.readUInt16("Scan_Window")
            phys.append(PHYParameters(scanInterval: si, scanWindow: sw, connection: try LEConnectionParameters(from: &r)))
        }
        self.phys = phys
    }
}
