// LE Controller commands, legacy set (Core Specification v5.4, Vol 4, Part E, §7.8).

/// LE Set Event Mask (§7.8.1).
public struct LESetEventMask: HCICommand {
    public static let opcode = HCIOpcode.leSetEventMask
    public var leEventMask: UInt64
    /// Connection Complete, Advertising Report, Connection Update Complete, Read Remote
    /// Features Complete, LTK Request, Data Length Change, Enhanced Connection Complete,
    /// Directed Advertising Report, PHY Update Complete, Extended Advertising Report,
    /// Scan Timeout, Advertising Set Terminated, Channel Selection Algorithm.
    public static let hostDefault: UInt64 =
        1 << 0 | 1 << 1 | 1 << 2 | 1 << 3 | 1 << 4 | 1 << 6 | 1 << 9 | 1 << 10 | 1 << 11 | 1 << 12
        | 1 << 16 | 1 << 17 | 1 << 19
    /// Periodic Advertising Sync Established, Report and Sync Lost: unmasked by a host
    /// once it synchronises to periodic advertising.
    public static let periodicAdvertisingEvents: UInt64 = 1 << 13 | 1 << 14 | 1 << 15
    public init(leEventMask: UInt64 = LESetEventMask.hostDefault) { self.leEventMask = leEventMask }
    public func encodeParameters(into w: inout ByteWriter) { w.write(leEventMask) }
    public init(parameters r: inout ByteReader) throws { leEventMask = try r.readUInt64("LE_Event_Mask") }
}

/// LE Read Buffer Size [v1] (§7.8.2). A length of 0 means "shared with BR/EDR".
public struct LEReadBufferSize: HCIParameterlessCommand {
    public static let opcode = HCIOpcode.leReadBufferSize
    public init() {}
    public struct ReturnParameters: HCIReturnParameters {
        public var leACLDataPacketLength: UInt16
        public var totalNumLEACLDataPackets: UInt8
        public init(leACLDataPacketLength: UInt16, totalNumLEACLDataPackets: UInt8) {
            self.leACLDataPacketLength = leACLDataPacketLength
            self.totalNumLEACLDataPackets = totalNumLEACLDataPackets
        }
        public init(returnParameters r: inout ByteReader) throws {
            leACLDataPacketLength = try r.readUInt16("LE_ACL_Data_Packet_Length")
            totalNumLEACLDataPackets = try r.readUInt8("Total_Num_LE_ACL_Data_Packets")
        }
        public func encode(into w: inout ByteWriter) { w.write(leACLDataPacketLength); w.write(totalNumLEACLDataPackets) }
    }
}

/// LE Read Buffer Size [v2] (§7.8.2), adding the ISO buffers.
public struct LEReadBufferSizeV2: HCIParameterlessCommand {
    public static let opcode = HCIOpcode.leReadBufferSizeV2
    public init() {}
    public struct ReturnParameters: HCIReturnParameters {
        public var leACLDataPacketLength: UInt16
        public var totalNumLEACLDataPackets: UInt8
        public var isoDataPacketLength: UInt16
        public var totalNumISODataPackets: UInt8
        public init(leACLDataPacketLength: UInt16, totalNumLEACLDataPackets: UInt8, isoDataPacketLength: UInt16, totalNumISODataPackets: UInt8) {
            self.leACLDataPacketLength = leACLDataPacketLength
            self.totalNumLEACLDataPackets = totalNumLEACLDataPackets
            self.isoDataPacketLength = isoDataPacketLength
            self.totalNumISODataPackets = totalNumISODataPackets
        }
        public init(returnParameters r: inout ByteReader) throws {
            leACLDataPacketLength = try r.readUInt16("LE_ACL_Data_Packet_Length")
            totalNumLEACLDataPackets = try r.readUInt8("Total_Num_LE_ACL_Data_Packets")
            isoDataPacketLength = try r.readUInt16("ISO_Data_Packet_Length")
            totalNumISODataPackets = try r.readUInt8("Total_Num_ISO_Data_Packets")
        }
        public func encode(into w: inout ByteWriter) {
            w.write(leACLDataPacketLength); w.write(totalNumLEACLDataPackets)
            w.write(isoDataPacketLength); w.write(totalNumISODataPackets)
        }
    }
}

/// Return parameters holding one 64-bit mask (LE features, LE states).
public struct HCIMask64Return: HCIReturnParameters {
    public var mask: UInt64
    public init(mask: UInt64) { self.mask = mask }
    public init(returnParameters r: inout ByteReader) throws { mask = try r.readUInt64("mask") }
    public func encode(into w: inout ByteWriter) { w.write(mask) }
}

/// LE Read Local Supported Features (§7.8.3). See `LEFeatures` for the bit names.
public struct LEReadLocalSupportedFeatures: HCIParameterlessCommand {
    public typealias ReturnParameters = HCIMask64Return
    public static let opcode = HCIOpcode.leReadLocalSupportedFeatures
    public init() {}
}

/// LE Read Supported States (§7.8.27).
public struct LEReadSupportedStates: HCIParameterlessCommand {
    public typealias ReturnParameters = HCIMask64Return
    public static let opcode = HCIOpcode.leReadSupportedStates
    public init() {}
}

/// LE Set Random Address (§7.8.4).
public struct LESetRandomAddress: HCICommand {
    public static let opcode = HCIOpcode.leSetRandomAddress
    public var randomAddress: BluetoothAddress
    public init(randomAddress: BluetoothAddress) { self.randomAddress = randomAddress }
    public func encodeParameters(into w: inout ByteWriter) { randomAddress.encode(into: &w) }
    public init(parameters r: inout ByteReader) throws { randomAddress = try BluetoothAddress(from: &r) }
}

/// LE Set Advertising Parameters (§7.8.5). Intervals in units of 0.625 ms.
public struct LESetAdvertisingParameters: HCICommand {
    public static let opcode = HCIOpcode.leSetAdvertisingParameters
    /// Advertising_Type: 0 ADV_IND, 1 ADV_DIRECT_IND (high duty), 2 ADV_SCAN_IND,
    /// 3 ADV_NONCONN_IND, 4 ADV_DIRECT_IND (low duty).
    public var advertisingIntervalMin: UInt16
    public var advertisingIntervalMax: UInt16
    public var advertisingType: UInt8
    public var ownAddressType: AddressType
    public var peerAddressType: AddressType
    public var peerAddress: BluetoothAddress
    public var advertisingChannelMap: UInt8
    public var advertisingFilterPolicy: UInt8
    public init(advertisingIntervalMin: UInt16 = 0x0800, advertisingIntervalMax: UInt16 = 0x0800, advertisingType: UInt8 = 0,
                ownAddressType: AddressType = .public, peerAddressType: AddressType = .public,
                peerAddress: BluetoothAddress = .zero, advertisingChannelMap: UInt8 = 0x07, advertisingFilterPolicy: UInt8 = 0) {
        self.advertisingIntervalMin = advertisingIntervalMin
        self.advertisingIntervalMax = advertisingIntervalMax
        self.advertisingType = advertisingType
        self.ownAddressType = ownAddressType
        self.peerAddressType = peerAddressType
        self.peerAddress = peerAddress
        self.advertisingChannelMap = advertisingChannelMap
        self.advertisingFilterPolicy = advertisingFilterPolicy
    }
    public func encodeParameters(into w: inout ByteWriter) {
        w.write(advertisingIntervalMin); w.write(advertisingIntervalMax); w.write(advertisingType)
        w.write(ownAddressType.rawValue); w.write(peerAddressType.rawValue); peerAddress.encode(into: &w)
        w.write(advertisingChannelMap); w.write(advertisingFilterPolicy)
    }
    public init(parameters r: inout ByteReader) throws {
        advertisingIntervalMin = try r.readUInt16("Advertising_Interval_Min")
        advertisingIntervalMax = try r.readUInt16("Advertising_Interval_Max")
        advertisingType = try r.readUInt8("Advertising_Type")
        ownAddressType = AddressType(rawValue: try r.readUInt8("Own_Address_Type"))
        peerAddressType = AddressType(rawValue: try r.readUInt8("Peer_Address_Type"))
        peerAddress = try BluetoothAddress(from: &r)
        advertisingChannelMap = try r.readUInt8("Advertising_Channel_Map")
        advertisingFilterPolicy = try r.readUInt8("Advertising_Filter_Policy")
    }
}

/// LE Read Advertising Physical Channel Tx Power (§7.8.6): Tx power in dBm (signed).
public struct LEReadAdvertisingPhysicalChannelTxPower: HCIParameterlessCommand {
    public typealias ReturnParameters = HCIOctetReturn
    public static let opcode = HCIOpcode.leReadAdvertisingPhysicalChannelTxPower
    public init() {}
}

/// The shared shape of LE Set Advertising Data and LE Set Scan Response Data:
/// a length octet, then 31 octets of which the first `length` are significant.
public protocol LELegacyAdvertisingPayloadCommand: HCICommand {
    var data: [UInt8] { get }
    init(data: [UInt8])
}

extension LELegacyAdvertisingPayloadCommand {
    public static var maximumLength: Int { 31 }
    public func encodeParameters(into w: inout ByteWriter) {
        let n = Swift.min(data.count, 31)
        w.write(UInt8(n))
        w.write(contentsOf: data.prefix(31))
        w.write(contentsOf: repeatElement(0 as UInt8, count: 31 - n))
    }
    public init(parameters r: inout ByteReader) throws {
        let n = Int(try r.readUInt8("Data_Length"))
        guard n <= 31 else { throw DecodeError.invalidValue(what: "\(Self.opcode) Data_Length", value: n) }
        let data = try r.readBytes(n, "Data")
        // The 31-octet field is padded; tolerate hosts that send only the significant part.
        _ = try r.readBytes(Swift.min(31 - n, r.remaining), "padding")
        self.init(data: data)
    }
}

/// LE Set Advertising Data (§7.8.7).
public struct LESetAdvertisingData: LELegacyAdvertisingPayloadCommand {
    public static let opcode = HCIOpcode.leSetAdvertisingData
    public var data: [UInt8]
    public init(data: [UInt8]) { self.data = data }
}

/// LE Set Scan Response Data (§7.8.8).
public struct LESetScanResponseData: LELegacyAdvertisingPayloadCommand {
    public static let opcode = HCIOpcode.leSetScanResponseData
    public var data: [UInt8]
    public init(data: [UInt8]) { self.data = data }
}

/// LE Set Advertising Enable (§7.8.9).
public struct LESetAdvertisingEnable: HCICommand {
    public static let opcode = HCIOpcode.leSetAdvertisingEnable
    public var advertisingEnable: Bool
    public init(advertisingEnable: Bool) { self.advertisingEnable = advertisingEnable }
    public func encodeParameters(into w: inout ByteWriter) { w.write(UInt8(advertisingEnable ? 1 : 0)) }
    public init(parameters r: inout ByteReader) throws { advertisingEnable = try r.readUInt8("Advertising_Enable") != 0 }
}

/// LE Set Scan Parameters (§7.8.10). Interval and window in units of 0.625 ms.
public struct LESetScanParameters: HCICommand {
    public static let opcode = HCIOpcode.leSetScanParameters
    /// 0 passive, 1 active.
    public var scanType: UInt8
    public var scanInterval: UInt16
    public var scanWindow: UInt16
    public var ownAddressType: AddressType
    public var scanningFilterPolicy: UInt8
    public init(scanType: UInt8 = 1, scanInterval: UInt16 = 0x0010, scanWindow: UInt16 = 0x0010,
                ownAddressType: AddressType = .public, scanningFilterPolicy: UInt8 = 0) {
        self.scanType = scanType
        self.scanInterval = scanInterval
        self.scanWindow = scanWindow
        self.ownAddressType = ownAddressType
        self.scanningFilterPolicy = scanningFilterPolicy
    }
    public func encodeParameters(into w: inout ByteWriter) {
        w.write(scanType); w.write(scanInterval); w.write(scanWindow)
        w.write(ownAddressType.rawValue); w.write(scanningFilterPolicy)
    }
    public init(parameters r: inout ByteReader) throws {
        scanType = try r.readUInt8("LE_Scan_Type")
        scanInterval = try r.readUInt16("LE_Scan_Interval")
        scanWindow = try r.readUInt16("LE_Scan_Window")
        ownAddressType = AddressType(rawValue: try r.readUInt8("Own_Address_Type"))
        scanningFilterPolicy = try r.readUInt8("Scanning_Filter_Policy")
    }
}

/// LE Set Scan Enable (§7.8.11).
public struct LESetScanEnable: HCICommand {
    public static let opcode = HCIOpcode.leSetScanEnable
    public var scanEnable: Bool
    public var filterDuplicates: Bool
    public init(scanEnable: Bool, filterDuplicates: Bool = false) {
        self.scanEnable = scanEnable
        self.filterDuplicates = filterDuplicates
    }
    public func encodeParameters(into w: inout ByteWriter) {
        w.write(UInt8(scanEnable ? 1 : 0)); w.write(UInt8(filterDuplicates ? 1 : 0))
    }
    public init(parameters r: inout ByteReader) throws {
        scanEnable = try r.readUInt8("LE_Scan_Enable") != 0
        filterDuplicates = try r.readUInt8("Filter_Duplicates") != 0
    }
}

/// Connection parameters shared by LE Create Connection, LE Extended Create Connection
/// and LE Connection Update. Interval in 1.25 ms, timeout in 10 ms, CE length in 0.625 ms.
public struct LEConnectionParameters: Hashable, Sendable {
    public var connectionIntervalMin: UInt16
    public var connectionIntervalMax: UInt16
    public var maxLatency: UInt16
    public var supervisionTimeout: UInt16
    public var minCELength: UInt16
    public var maxCELength: UInt16
    public init(connectionIntervalMin: UInt16 = 0x0018, connectionIntervalMax: UInt16 = 0x0028, maxLatency: UInt16 = 0,
                supervisionTimeout: UInt16 = 0x01F4, minCELength: UInt16 = 0, maxCELength: UInt16 = 0) {
        self.connectionIntervalMin = connectionIntervalMin
        self.connectionIntervalMax = connectionIntervalMax
        self.maxLatency = maxLatency
        self.supervisionTimeout = supervisionTimeout
        self.minCELength = minCELength
        self.maxCELength = maxCELength
    }
    public func encode(into w: inout ByteWriter) {
        w.write(connectionIntervalMin); w.write(connectionIntervalMax); w.write(maxLatency)
        w.write(supervisionTimeout); w.write(minCELength); w.write(maxCELength)
    }

    /// What is wrong with these parameters (§7.8.12, Vol 6, Part B, §4.5.2), nil when
    /// nothing is: a field outside its range (the interval 6 to 3200 × 1.25 ms, the
    /// latency up to 499 events, the timeout 10 to 3200 × 10 ms), or fields that
    /// disagree (a minimum interval above the maximum, a timeout not longer than
    /// (1 + latency) × the maximum interval × 2). The CE lengths are hints, not checked.
    public var fault: LEConnectionParametersFault? {
        let interval: ClosedRange<UInt16> = 0x0006...0x0C80
        guard interval.contains(connectionIntervalMin), interval.contains(connectionIntervalMax) else {
            return .outOfRange("the connection interval is 6 to 3200 × 1.25 ms, not \(connectionIntervalMin) to \(connectionIntervalMax)")
        }
        guard maxLatency <= 0x01F3 else { return .outOfRange("the latency is at most 499 connection events, not \(maxLatency)") }
        guard (0x000A...0x0C80).contains(supervisionTimeout) else {
            return .outOfRange("the supervision timeout is 10 to 3200 × 10 ms, not \(supervisionTimeout)")
        }
        guard connectionIntervalMin <= connectionIntervalMax else {
            return .inconsistent("the minimum connection interval \(connectionIntervalMin) is above the maximum \(connectionIntervalMax)")
        }
        // timeout × 10 ms > (1 + latency) × interval × 1.25 ms × 2
        guard 4 * Int(supervisionTimeout) > (1 + Int(maxLatency)) * Int(connectionIntervalMax) else {
            return .inconsistent("a supervision timeout of \(Int(supervisionTimeout) * 10) ms is not longer than (1 + latency \(maxLatency)) × "
                                 + "\(Double(connectionIntervalMax) * 1.25) ms × 2")
        }
        return nil
    }

    public init(from r: inout ByteReader) throws {
        connectionIntervalMin = try r.readUInt16("Connection_Interval_Min")
        connectionIntervalMax = try r.readUInt16("Connection_Interval_Max")
        maxLatency = try r.readUInt16("Max_Latency")
        supervisionTimeout = try r.readUInt16("Supervision_Timeout")
        minCELength = try r.readUInt16("Min_CE_Length")
        maxCELength = try r.readUInt16("Max_CE_Length")
    }
}

/// Why `LEConnectionParameters` cannot be used, described.
public enum LEConnectionParametersFault: Hashable, Sendable, CustomStringConvertible {
    /// A field outside the range the specification gives it (a controller answers
    /// Unsupported Feature or Parameter Value, as Rootcanal does).
    case outOfRange(String)
    /// Fields that disagree with each other (Invalid HCI Command Parameters).
    case inconsistent(String)

    public var description: String {
        switch self {
        case let .outOfRange(s), let .inconsistent(s): s
        }
    }
}

/// LE Create Connection (§7.8.12). Command Status; LE (Enhanced) Connection Complete follows.
public struct LECreateConnection: HCICommand {
    public static let opcode = HCIOpcode.leCreateConnection
    public static let completesWithStatus = true
    public var scanInterval: UInt16
    public var scanWindow: UInt16
    public var initiatorFilterPolicy: UInt8
    public var peerAddressType: AddressType
    public var peerAddress: BluetoothAddress
    public var ownAddressType: AddressType
    public var connection: LEConnectionParameters
    public init(scanInterval: UInt16 = 0x0060, scanWindow: UInt16 = 0x0060, initiatorFilterPolicy: UInt8 = 0,
                peerAddressType: AddressType, peerAddress: BluetoothAddress, ownAddressType: AddressType = .public,
                connection: LEConnectionParameters = LEConnectionParameters()) {
        self.scanInterval = scanInterval
        self.scanWindow = scanWindow
        self.initiatorFilterPolicy = initiatorFilterPolicy
        self.peerAddressType = peerAddressType
        self.peerAddress = peerAddress
        self.ownAddressType = ownAddressType
        self.connection = connection
    }
    public func encodeParameters(into w: inout ByteWriter) {
        w.write(scanInterval); w.write(scanWindow); w.write(initiatorFilterPolicy)
        w.write(peerAddressType.rawValue); peerAddress.encode(into: &w); w.write(ownAddressType.rawValue)
        connection.encode(into: &w)
    }
    public init(parameters r: inout ByteReader) throws {
        scanInterval = try r.readUInt16("LE_Scan_Interval")
        scanWindow = try r.readUInt16("LE_Scan_Window")
        initiatorFilterPolicy = try r.readUInt8("Initiator_Filter_Policy")
        peerAddressType = AddressType(rawValue: try r.readUInt8("Peer_Address_Type"))
        peerAddress = try BluetoothAddress(from: &r)
        ownAddressType = AddressType(rawValue: try r.readUInt8("Own_Address_Type"))
        connection = try LEConnectionParameters(from: &r)
    }
}

/// LE Create Connection Cancel (§7.8.13).
public struct LECreateConnectionCancel: HCIParameterlessCommand {
    public static let opcode = HCIOpcode.leCreateConnectionCancel
    public init() {}
}

/// LE Read Filter Accept List Size (§7.8.14).
public struct LEReadFilterAcceptListSize: HCIParameterlessCommand {
    public typealias ReturnParameters = HCIOctetReturn
    public static let opcode = HCIOpcode.leReadFilterAcceptListSize
    public init() {}
}

/// LE Clear Filter Accept List (§7.8.15).
public struct LEClearFilterAcceptList: HCIParameterlessCommand {
    public static let opcode = HCIOpcode.leClearFilterAcceptList
    public init() {}
}

/// The address-and-type parameter pair of the filter accept list commands.
public protocol LEFilterAcceptListEntryCommand: HCICommand {
    var addressType: AddressType { get }
    var address: BluetoothAddress { get }
    init(addressType: AddressType, address: BluetoothAddress)
}

extension LEFilterAcceptListEntryCommand {
    public func encodeParameters(into w: inout ByteWriter) { w.write(addressType.rawValue); address.encode(into: &w) }
    public init(parameters r: inout ByteReader) throws {
        let t = AddressType(rawValue: try r.readUInt8("Address_Type"))
        self.init(addressType: t, address: try BluetoothAddress(from: &r))
    }
}

/// LE Add Device To Filter Accept List (§7.8.16).
public struct LEAddDeviceToFilterAcceptList: LEFilterAcceptListEntryCommand {
    public static let opcode = HCIOpcode.leAddDeviceToFilterAcceptList
    public var addressType: AddressType
    public var address: BluetoothAddress
    public init(addressType: AddressType, address: BluetoothAddress) {
        self.addressType = addressType
        self.address = address
    }
}

/// LE Remove Device From Filter Accept List (§7.8.17).
public struct LERemoveDeviceFromFilterAcceptList: LEFilterAcceptListEntryCommand {
    public static let opcode = HCIOpcode.leRemoveDeviceFromFilterAcceptList
    public var addressType: AddressType
    public var address: BluetoothAddress
    public init(addressType: AddressType, address: BluetoothAddress) {
        self.addressType = addressType
        self.address = address
    }
}

/// LE Connection Update (§7.8.18). Command Status; LE Connection Update Complete follows.
public struct LEConnectionUpdate: HCICommand {
    public static let opcode = HCIOpcode.leConnectionUpdate
    public static let completesWithStatus = true
    public var connectionHandle: UInt16
    public var connection: LEConnectionParameters
    public init(connectionHandle: UInt16, connection: LEConnectionParameters) {
        self.connectionHandle = connectionHandle
        self.connection = connection
    }
    public func encodeParameters(into w: inout ByteWriter) { w.write(connectionHandle); connection.encode(into: &w) }
    public init(parameters r: inout ByteReader) throws {
        connectionHandle = try r.readUInt16("Connection_Handle")
        connection = try LEConnectionParameters(from: &r)
    }
}

/// LE Read Remote Features (§7.8.21). Command Status; LE Read Remote Features Complete follows.
public struct LEReadRemoteFeatures: HCICommand {
    public static let opcode = HCIOpcode.leReadRemoteFeatures
    public static let completesWithStatus = true
    public var connectionHandle: UInt16
    public init(connectionHandle: UInt16) { self.connectionHandle = connectionHandle }
    public func encodeParameters(into w: inout ByteWriter) { w.write(connectionHandle) }
    public init(parameters r: inout ByteReader) throws { connectionHandle = try r.readUInt16("Connection_Handle") }
}

/// LE Enable Encryption (§7.8.24). Command Status; Encryption Change follows.
public struct LEEnableEncryption: HCICommand {
    public static let opcode = HCIOpcode.leEnableEncryption
    public static let completesWithStatus = true
    public var connectionHandle: UInt16
    public var randomNumber: UInt64
    public var encryptedDiversifier: UInt16
    public var longTermKey: [UInt8]
    public init(connectionHandle: UInt16, randomNumber: UInt64, encryptedDiversifier: UInt16, longTermKey: [UInt8]) {
        self.connectionHandle = connectionHandle
        self.randomNumber = randomNumber
        self.encryptedDiversifier = encryptedDiversifier
        self.longTermKey = longTermKey
    }
    public func encodeParameters(into w: inout ByteWriter) {
        w.write(connectionHandle); w.write(randomNumber); w.write(encryptedDiversifier)
        w.write(contentsOf: (longTermKey + [UInt8](repeating: 0, count: 16)).prefix(16))
    }
    public init(parameters r: inout ByteReader) throws {
        connectionHandle = try r.readUInt16("Connection_Handle")
        randomNumber = try r.readUInt64("Random_Number")
        encryptedDiversifier = try r.readUInt16("Encrypted_Diversifier")
        longTermKey = try r.readBytes(16, "Long_Term_Key")
    }
}

/// LE Encrypt (§7.8.22): the controller's AES-128 of one block. Key and plaintext go
/// as every HCI parameter goes, least significant octet first: the reverse of the
/// FIPS-197 notation (key[0] there is the last octet here); so does the result.
public struct LEEncrypt: HCICommand {
    public static let opcode = HCIOpcode.leEncrypt
    public var key: [UInt8]
    public var plaintextData: [UInt8]
    public init(key: [UInt8], plaintextData: [UInt8]) {
        self.key = key
        self.plaintextData = plaintextData
    }
    public func encodeParameters(into w: inout ByteWriter) {
        w.write(contentsOf: (key + [UInt8](repeating: 0, count: 16)).prefix(16))
        w.write(contentsOf: (plaintextData + [UInt8](repeating: 0, count: 16)).prefix(16))
    }
    public init(parameters r: inout ByteReader) throws {
        key = try r.readBytes(16, "Key")
        plaintextData = try r.readBytes(16, "Plaintext_Data")
    }
    public struct ReturnParameters: HCIReturnParameters {
        public var encryptedData: [UInt8]
        public init(encryptedData: [UInt8]) { self.encryptedData = encryptedData }
        public init(returnParameters r: inout ByteReader) throws { encryptedData = try r.readBytes(16, "Encrypted_Data") }
        public func encode(into w: inout ByteWriter) { w.write(contentsOf: (encryptedData + [UInt8](repeating: 0, count: 16)).prefix(16)) }
    }
}

/// LE Rand (§7.8.23): 8 octets from the controller's random number generator.
public struct LERand: HCIParameterlessCommand {
    public static let opcode = HCIOpcode.leRand
    public init() {}
    public struct ReturnParameters: HCIReturnParameters {
        public var randomNumber: UInt64
        public init(randomNumber: UInt64) { self.randomNumber = randomNumber }
        public init(returnParameters r: inout ByteReader) throws { randomNumber = try r.readUInt64("Random_Number") }
        public func encode(into w: inout ByteWriter) { w.write(randomNumber) }
    }
}

/// LE Long Term Key Request Reply (§7.8.25).
public struct LELongTermKeyRequestReply: HCICommand {
    public typealias ReturnParameters = HCIConnectionHandleReturn
    public static let opcode = HCIOpcode.leLongTermKeyRequestReply
    public var connectionHandle: UInt16
    public var longTermKey: [UInt8]
    public init(connectionHandle: UInt16, longTermKey: [UInt8]) {
        self.connectionHandle = connectionHandle
        self.longTermKey = longTermKey
    }
    public func encodeParameters(into w: inout ByteWriter) {
        w.write(connectionHandle)
        w.write(contentsOf: (longTermKey + [UInt8](repeating: 0, count: 16)).prefix(16))
    }
    public init(parameters r: inout ByteReader) throws {
        connectionHandle = try r.readUInt16("Connection_Handle")
        longTermKey = try r.readBytes(16, "Long_Term_Key")
    }
}

/// LE Long Term Key Request Negative Reply (§7.8.26).
public struct LELongTermKeyRequestNegativeReply: HCICommand {
    public typealias ReturnParameters = HCIConnectionHandleReturn
    public static let opcode = HCIOpcode.leLongTermKeyRequestNegativeReply
    public var connectionHandle: UInt16
    public init(connectionHandle: UInt16) { self.connectionHandle = connectionHandle }
    public func encodeParameters(into w: inout ByteWriter) { w.write(connectionHandle) }
    public init(parameters r: inout ByteReader) throws { connectionHandle = try r.readUInt16("Connection_Handle") }
}

/// LE Set Data Length (§7.8.33).
public struct LESetDataLength: HCICommand {
    public typealias ReturnParameters = HCIConnectionHandleReturn
    public static let opcode = HCIOpcode.leSetDataLength
    public var connectionHandle: UInt16
    public var txOctets: UInt16
    public var txTime: UInt16
    public init(connectionHandle: UInt16, txOctets: UInt16 = 251, txTime: UInt16 = 2120) {
        self.connectionHandle = connectionHandle
        self.txOctets = txOctets
        self.txTime = txTime
    }
    public func encodeParameters(into w: inout ByteWriter) { w.write(connectionHandle); w.write(txOctets); w.write(txTime) }
    public init(parameters r: inout ByteReader) throws {
        connectionHandle = try r.readUInt16("Connection_Handle")
        txOctets = try r.readUInt16("TX_Octets")
        txTime = try r.readUInt16("TX_Time")
    }
}

/// What the spec allows for TX_Octets and TX_Time (§7.8.33, §7.8.35): 27 to 251
/// octets, 328 to 17040 µs.
public enum LEDataLengthRange {
    public static let octets: ClosedRange<UInt16> = 0x001B...0x00FB
    public static let time: ClosedRange<UInt16> = 0x0148...0x4290
}

/// LE Read Suggested Default Data Length (§7.8.34): the TX octets and time the
/// controller starts each new link with (27 and 328 until the host writes others).
public struct LEReadSuggestedDefaultDataLength: HCIParameterlessCommand {
    public static let opcode = HCIOpcode.leReadSuggestedDefaultDataLength
    public init() {}
    public struct ReturnParameters: HCIReturnParameters {
        public var suggestedMaxTxOctets: UInt16
        public var suggestedMaxTxTime: UInt16
        public init(suggestedMaxTxOctets: UInt16, suggestedMaxTxTime: UInt16) {
            self.suggestedMaxTxOctets = suggestedMaxTxOctets
            self.suggestedMaxTxTime = suggestedMaxTxTime
        }
        public init(returnParameters r: inout ByteReader) throws {
            suggestedMaxTxOctets = try r.readUInt16("Suggested_Max_TX_Octets")
            suggestedMaxTxTime = try r.readUInt16("Suggested_Max_TX_Time")
        }
        public func encode(into w: inout ByteWriter) { w.write(suggestedMaxTxOctets); w.write(suggestedMaxTxTime) }
    }
}

/// LE Write Suggested Default Data Length (§7.8.35): the TX octets and time the
/// controller offers on each new link (and asks for at once when above 27 and 328).
public struct LEWriteSuggestedDefaultDataLength: HCICommand {
    public static let opcode = HCIOpcode.leWriteSuggestedDefaultDataLength
    public var suggestedMaxTxOctets: UInt16
    public var suggestedMaxTxTime: UInt16
    public init(suggestedMaxTxOctets: UInt16, suggestedMaxTxTime: UInt16) {
        self.suggestedMaxTxOctets = suggestedMaxTxOctets
        self.suggestedMaxTxTime = suggestedMaxTxTime
    }
    public func encodeParameters(into w: inout ByteWriter) { w.write(suggestedMaxTxOctets); w.write(suggestedMaxTxTime) }
    public init(parameters r: inout ByteReader) throws {
        suggestedMaxTxOctets = try r.readUInt16("Suggested_Max_TX_Octets")
        suggestedMaxTxTime = try r.readUInt16("Suggested_Max_TX_Time")
    }
}

/// LE Read Maximum Data Length (§7.8.46).
public struct LEReadMaximumDataLength: HCIParameterlessCommand {
    public static let opcode = HCIOpcode.leReadMaximumDataLength
    public init() {}
    public struct ReturnParameters: HCIReturnParameters {
        public var supportedMaxTxOctets: UInt16
        public var supportedMaxTxTime: UInt16
        public var supportedMaxRxOctets: UInt16
        public var supportedMaxRxTime: UInt16
        public init(supportedMaxTxOctets: UInt16, supportedMaxTxTime: UInt16, supportedMaxRxOctets: UInt16, supportedMaxRxTime: UInt16) {
            self.supportedMaxTxOctets = supportedMaxTxOctets
            self.supportedMaxTxTime = supportedMaxTxTime
            self.supportedMaxRxOctets = supportedMaxRxOctets
            self.supportedMaxRxTime = supportedMaxRxTime
        }
        public init(returnParameters r: inout ByteReader) throws {
            supportedMaxTxOctets = try r.readUInt16("Supported_Max_TX_Octets")
            supportedMaxTxTime = try r.readUInt16("Supported_Max_TX_Time")
            supportedMaxRxOctets = try r.readUInt16("Supported_Max_RX_Octets")
            supportedMaxRxTime = try r.readUInt16("Supported_Max_RX_Time")
        }
        public func encode(into w: inout ByteWriter) {
            w.write(supportedMaxTxOctets); w.write(supportedMaxTxTime)
            w.write(supportedMaxRxOctets); w.write(supportedMaxRxTime)
        }
    }
}

/// LE Read PHY (§7.8.47): the PHYs a link transmits and receives on (1 LE 1M,
/// 2 LE 2M, 3 LE Coded).
public struct LEReadPHY: HCICommand {
    public static let opcode = HCIOpcode.leReadPHY
    public var connectionHandle: UInt16
    public init(connectionHandle: UInt16) { self.connectionHandle = connectionHandle }
    public func encodeParameters(into w: inout ByteWriter) { w.write(connectionHandle) }
    public init(parameters r: inout ByteReader) throws { connectionHandle = try r.readUInt16("Connection_Handle") }
    public struct ReturnParameters: HCIReturnParameters {
        public var connectionHandle: UInt16
        public var txPHY: UInt8
        public var rxPHY: UInt8
        public init(connectionHandle: UInt16, txPHY: UInt8, rxPHY: UInt8) {
            self.connectionHandle = connectionHandle
            self.txPHY = txPHY
            self.rxPHY = rxPHY
        }
        public init(returnParameters r: inout ByteReader) throws {
            connectionHandle = try r.readUInt16("Connection_Handle")
            txPHY = try r.readUInt8("TX_PHY")
            rxPHY = try r.readUInt8("RX_PHY")
        }
        public func encode(into w: inout ByteWriter) { w.write(connectionHandle); w.write(txPHY); w.write(rxPHY) }
    }
}

/// LE Set Default PHY (§7.8.48). PHY bits: 0x01 LE 1M, 0x02 LE 2M, 0x04 LE Coded.
public struct LESetDefaultPHY: HCICommand {
    public static let opcode = HCIOpcode.leSetDefaultPHY
    public var allPHYs: UInt8
    public var txPHYs: UInt8
    public var rxPHYs: UInt8
    public init(allPHYs: UInt8 = 0, txPHYs: UInt8 = 0x03, rxPHYs: UInt8 = 0x03) {
        self.allPHYs = allPHYs
        self.txPHYs = txPHYs
        self.rxPHYs = rxPHYs
    }
    public func encodeParameters(into w: inout ByteWriter) { w.write(allPHYs); w.write(txPHYs); w.write(rxPHYs) }
    public init(parameters r: inout ByteReader) throws {
        allPHYs = try r.readUInt8("All_PHYs")
        txPHYs = try r.readUInt8("TX_PHYs")
        rxPHYs = try r.readUInt8("RX_PHYs")
    }
}

/// LE Set PHY (§7.8.49). Command Status; LE PHY Update Complete follows.
public struct LESetPHY: HCICommand {
    public static let opcode = HCIOpcode.leSetPHY
    public static let completesWithStatus = true
    public var connectionHandle: UInt16
    public var allPHYs: UInt8
    public var txPHYs: UInt8
    public var rxPHYs: UInt8
    public var phyOptions: UInt16
    public init(connectionHandle: UInt16, allPHYs: UInt8 = 0, txPHYs: UInt8 = 0x02, rxPHYs: UInt8 = 0x02, phyOptions: UInt16 = 0) {
        self.connectionHandle = connectionHandle
        self.allPHYs = allPHYs
        self.txPHYs = txPHYs
        self.rxPHYs = rxPHYs
        self.phyOptions = phyOptions
    }
    public func encodeParameters(into w: inout ByteWriter) {
        w.write(connectionHandle); w.write(allPHYs); w.write(txPHYs); w.write(rxPHYs); w.write(phyOptions)
    }
    public init(parameters r: inout ByteReader) throws {
        connectionHandle = try r.readUInt16("Connection_Handle")
        allPHYs = try r.readUInt8("All_PHYs")
        txPHYs = try r.readUInt8("TX_PHYs")
        rxPHYs = try r.readUInt8("RX_PHYs")
        phyOptions = try r.readUInt16("PHY_Options")
    }
}

// MARK: - The resolving list (§7.8.38–§7.8.44, §7.8.77): the controller resolves
// peers' private addresses with their IRKs and reports them by identity.

/// LE Add Device To Resolving List (§7.8.38). IRKs are 16 octets, least significant
/// first; a zero local IRK means the controller uses our identity address.
public struct LEAddDeviceToResolvingList: HCICommand {
    public static let opcode = HCIOpcode.leAddDeviceToResolvingList
    public var peerIdentityAddressType: AddressType
    public var peerIdentityAddress: BluetoothAddress
    public var peerIRK: [UInt8]
    public var localIRK: [UInt8]
    public init(peerIdentityAddressType: AddressType, peerIdentityAddress: BluetoothAddress, peerIRK: [UInt8], localIRK: [UInt8]) {
        self.peerIdentityAddressType = peerIdentityAddressType
        self.peerIdentityAddress = peerIdentityAddress
        self.peerIRK = peerIRK
        self.localIRK = localIRK
    }
    public func encodeParameters(into w: inout ByteWriter) {
        w.write(peerIdentityAddressType.rawValue); peerIdentityAddress.encode(into: &w)
        w.write(contentsOf: Self.sixteen(peerIRK)); w.write(contentsOf: Self.sixteen(localIRK))
    }
    public init(parameters r: inout ByteReader) throws {
        peerIdentityAddressType = AddressType(rawValue: try r.readUInt8("Peer_Identity_Address_Type"))
        peerIdentityAddress = try BluetoothAddress(from: &r)
        peerIRK = try r.readBytes(16, "Peer_IRK")
        localIRK = try r.readBytes(16, "Local_IRK")
    }
    /// Exactly 16 octets (a key of another length is padded or cut, never sent short).
    static func sixteen(_ k: [UInt8]) -> [UInt8] { Array((k + [UInt8](repeating: 0, count: 16)).prefix(16)) }
}

/// LE Remove Device From Resolving List (§7.8.39).
public struct LERemoveDeviceFromResolvingList: HCICommand {
    public static let opcode = HCIOpcode.leRemoveDeviceFromResolvingList
    public var peerIdentityAddressType: AddressType
    public var peerIdentityAddress: BluetoothAddress
    public init(peerIdentityAddressType: AddressType, peerIdentityAddress: BluetoothAddress) {
        self.peerIdentityAddressType = peerIdentityAddressType
        self.peerIdentityAddress = peerIdentityAddress
    }
    public func encodeParameters(into w: inout ByteWriter) { w.write(peerIdentityAddressType.rawValue); peerIdentityAddress.encode(into: &w) }
    public init(parameters r: inout ByteReader) throws {
        peerIdentityAddressType = AddressType(rawValue: try r.readUInt8("Peer_Identity_Address_Type"))
        peerIdentityAddress = try BluetoothAddress(from: &r)
    }
}

/// LE Clear Resolving List (§7.8.40).
public struct LEClearResolvingList: HCIParameterlessCommand {
    public static let opcode = HCIOpcode.leClearResolvingList
    public init() {}
}

/// LE Read Resolving List Size (§7.8.41).
public struct LEReadResolvingListSize: HCIParameterlessCommand {
    public typealias ReturnParameters = HCIOctetReturn
    public static let opcode = HCIOpcode.leReadResolvingListSize
    public init() {}
}

/// LE Set Address Resolution Enable (§7.8.44).
public struct LESetAddressResolutionEnable: HCICommand {
    public static let opcode = HCIOpcode.leSetAddressResolutionEnable
    public var enable: Bool
    public init(enable: Bool) { self.enable = enable }
    public func encodeParameters(into w: inout ByteWriter) { w.write(UInt8(enable ? 1 : 0)) }
    public init(parameters r: inout ByteReader) throws { enable = try r.readUInt8("Address_Resolution_Enable") != 0 }
}

/// LE Set Privacy Mode (§7.8.77): 0 network privacy (the peer's identity address is
/// ignored once it is in the resolving list), 1 device privacy (accepted too).
public struct LESetPrivacyMode: HCICommand {
    public static let opcode = HCIOpcode.leSetPrivacyMode
    public var peerIdentityAddressType: AddressType
    public var peerIdentityAddress: BluetoothAddress
    public var privacyMode: UInt8
    public init(peerIdentityAddressType: AddressType, peerIdentityAddress: BluetoothAddress, privacyMode: UInt8) {
        self.peerIdentityAddressType = peerIdentityAddressType
        self.peerIdentityAddress = peerIdentityAddress
        self.privacyMode = privacyMode
    }
    public func encodeParameters(into w: inout ByteWriter) {
        w.write(peerIdentityAddressType.rawValue); peerIdentityAddress.encode(into: &w); w.write(privacyMode)
    }
    public init(parameters r: inout ByteReader) throws {
        peerIdentityAddressType = AddressType(rawValue: try r.readUInt8("Peer_Identity_Address_Type"))
        peerIdentityAddress = try BluetoothAddress(from: &r)
        privacyMode = try r.readUInt8("Privacy_Mode")
    }
}
