// Link Control, Controller & Baseband, Informational and Status commands
// (Core Specification v5.4, Vol 4, Part E, §7.1, §7.3, §7.4, §7.5).

/// Disconnect (§7.1.6). Answered by Command Status; Disconnection Complete follows.
public struct Disconnect: HCICommand {
    public static let opcode = HCIOpcode.disconnect
    public static let completesWithStatus = true
    public var connectionHandle: UInt16
    public var reason: HCIStatus
    public init(connectionHandle: UInt16, reason: HCIStatus = .remoteUserTerminatedConnection) {
        self.connectionHandle = connectionHandle
        self.reason = reason
    }
    public func encodeParameters(into w: inout ByteWriter) {
        w.write(connectionHandle)
        w.write(reason.rawValue)
    }
    public init(parameters r: inout ByteReader) throws {
        connectionHandle = try r.readUInt16("Connection_Handle")
        reason = HCIStatus(rawValue: try r.readUInt8("Reason"))
    }
}

/// Read Remote Version Information (§7.1.23). Command Status, then its Complete event.
public struct ReadRemoteVersionInformation: HCICommand {
    public static let opcode = HCIOpcode.readRemoteVersionInformation
    public static let completesWithStatus = true
    public var connectionHandle: UInt16
    public init(connectionHandle: UInt16) { self.connectionHandle = connectionHandle }
    public func encodeParameters(into w: inout ByteWriter) { w.write(connectionHandle) }
    public init(parameters r: inout ByteReader) throws { connectionHandle = try r.readUInt16("Connection_Handle") }
}

/// Set Event Mask (§7.3.1).
public struct SetEventMask: HCICommand {
    public static let opcode = HCIOpcode.setEventMask
    public var eventMask: UInt64
    /// Disconnection Complete, Encryption Change, Read Remote Version Information Complete,
    /// Hardware Error, Data Buffer Overflow, Encryption Key Refresh Complete, LE Meta.
    public static let leHostDefault: UInt64 =
        1 << 4 | 1 << 7 | 1 << 11 | 1 << 15 | 1 << 25 | 1 << 47 | 1 << 61
    public init(eventMask: UInt64 = SetEventMask.leHostDefault) { self.eventMask = eventMask }
    public func encodeParameters(into w: inout ByteWriter) { w.write(eventMask) }
    public init(parameters r: inout ByteReader) throws { eventMask = try r.readUInt64("Event_Mask") }
}

/// Set Event Mask Page 2 (§7.3.69): events the first page has no room for. The LE
/// host enables Encryption Change [v2] (bit 25), which reports the key size with the
/// change, where the controller has the command.
public struct SetEventMaskPage2: HCICommand {
    public static let opcode = HCIOpcode.setEventMaskPage2
    public var eventMaskPage2: UInt64
    /// Encryption Change [v2].
    public static let encryptionChangeV2: UInt64 = 1 << 25
    public init(eventMaskPage2: UInt64 = SetEventMaskPage2.encryptionChangeV2) { self.eventMaskPage2 = eventMaskPage2 }
    public func encodeParameters(into w: inout ByteWriter) { w.write(eventMaskPage2) }
    public init(parameters r: inout ByteReader) throws { eventMaskPage2 = try r.readUInt64("Event_Mask_Page_2") }
}

/// Reset (§7.3.2).
public struct Reset: HCIParameterlessCommand {
    public static let opcode = HCIOpcode.reset
    public init() {}
}

/// Read Local Version Information (§7.4.1).
public struct ReadLocalVersionInformation: HCIParameterlessCommand {
    public static let opcode = HCIOpcode.readLocalVersionInformation
    public init() {}
    public struct ReturnParameters: HCIReturnParameters {
        public var hciVersion: UInt8
        public var hciSubversion: UInt16
        public var lmpVersion: UInt8
        public var companyIdentifier: UInt16
        public var lmpSubversion: UInt16
        public init(hciVersion: UInt8, hciSubversion: UInt16, lmpVersion: UInt8, companyIdentifier: UInt16, lmpSubversion: UInt16) {
            self.hciVersion = hciVersion
            self.hciSubversion = hciSubversion
            self.lmpVersion = lmpVersion
            self.companyIdentifier = companyIdentifier
            self.lmpSubversion = lmpSubversion
        }
        public init(returnParameters r: inout ByteReader) throws {
            hciVersion = try r.readUInt8("HCI_Version")
            hciSubversion = try r.readUInt16("HCI_Subversion")
            lmpVersion = try r.readUInt8("LMP_Version")
            companyIdentifier = try r.readUInt16("Company_Identifier")
            lmpSubversion = try r.readUInt16("LMP_Subversion")
        }
        public func encode(into w: inout ByteWriter) {
            w.write(hciVersion); w.write(hciSubversion); w.write(lmpVersion)
            w.write(companyIdentifier); w.write(lmpSubversion)
        }
    }
}

/// Read Local Supported Commands (§7.4.2): a 64-octet bit mask (§6.27).
public struct ReadLocalSupportedCommands: HCIParameterlessCommand {
    public static let opcode = HCIOpcode.readLocalSupportedCommands
    public init() {}
    public struct ReturnParameters: HCIReturnParameters {
        public var supportedCommands: SupportedCommands
        public init(supportedCommands: SupportedCommands) { self.supportedCommands = supportedCommands }
        public init(returnParameters r: inout ByteReader) throws {
            supportedCommands = SupportedCommands(bytes: try r.readBytes(64, "Supported_Commands"))
        }
        public func encode(into w: inout ByteWriter) { w.write(contentsOf: supportedCommands.bytes) }
    }
}

/// Read Local Supported Features (§7.4.3): the LMP feature mask.
public struct ReadLocalSupportedFeatures: HCIParameterlessCommand {
    public static let opcode = HCIOpcode.readLocalSupportedFeatures
    public init() {}
    public struct ReturnParameters: HCIReturnParameters {
        public var lmpFeatures: UInt64
        public init(lmpFeatures: UInt64) { self.lmpFeatures = lmpFeatures }
        public init(returnParameters r: inout ByteReader) throws { lmpFeatures = try r.readUInt64("LMP_Features") }
        public func encode(into w: inout ByteWriter) { w.write(lmpFeatures) }
        /// Bit 38: "LE Supported (Controller)".
        public var leSupported: Bool { lmpFeatures & (1 << 38) != 0 }
        /// Bit 37: "BR/EDR Not Supported".
        public var brEdrNotSupported: Bool { lmpFeatures & (1 << 37) != 0 }
    }
}

/// Read Buffer Size (§7.4.5): the BR/EDR (and, when LE reports 0, shared) ACL buffers.
public struct ReadBufferSize: HCIParameterlessCommand {
    public static let opcode = HCIOpcode.readBufferSize
    public init() {}
    public struct ReturnParameters: HCIReturnParameters {
        public var aclDataPacketLength: UInt16
        public var synchronousDataPacketLength: UInt8
        public var totalNumACLDataPackets: UInt16
        public var totalNumSynchronousDataPackets: UInt16
        public init(aclDataPacketLength: UInt16, synchronousDataPacketLength: UInt8, totalNumACLDataPackets: UInt16, totalNumSynchronousDataPackets: UInt16) {
            self.aclDataPacketLength = aclDataPacketLength
            self.synchronousDataPacketLength = synchronousDataPacketLength
            self.totalNumACLDataPackets = totalNumACLDataPackets
            self.totalNumSynchronousDataPackets = totalNumSynchronousDataPackets
        }
        public init(returnParameters r: inout ByteReader) throws {
            aclDataPacketLength = try r.readUInt16("ACL_Data_Packet_Length")
            synchronousDataPacketLength = try r.readUInt8("Synchronous_Data_Packet_Length")
            totalNumACLDataPackets = try r.readUInt16("Total_Num_ACL_Data_Packets")
            totalNumSynchronousDataPackets = try r.readUInt16("Total_Num_Synchronous_Data_Packets")
        }
        public func encode(into w: inout ByteWriter) {
            w.write(aclDataPacketLength); w.write(synchronousDataPacketLength)
            w.write(totalNumACLDataPackets); w.write(totalNumSynchronousDataPackets)
        }
    }
}

/// Read BD_ADDR (§7.4.6).
public struct ReadBDADDR: HCIParameterlessCommand {
    public static let opcode = HCIOpcode.readBDADDR
    public init() {}
    public struct ReturnParameters: HCIReturnParameters {
        public var address: BluetoothAddress
        public init(address: BluetoothAddress) { self.address = address }
        public init(returnParameters r: inout ByteReader) throws { address = try BluetoothAddress(from: &r) }
        public func encode(into w: inout ByteWriter) { address.encode(into: &w) }
    }
}

/// Read RSSI (§7.5.4).
public struct ReadRSSI: HCICommand {
    public static let opcode = HCIOpcode.readRSSI
    public var connectionHandle: UInt16
    public init(connectionHandle: UInt16) { self.connectionHandle = connectionHandle }
    public func encodeParameters(into w: inout ByteWriter) { w.write(connectionHandle) }
    public init(parameters r: inout ByteReader) throws { connectionHandle = try r.readUInt16("Handle") }
    public struct ReturnParameters: HCIReturnParameters {
        public var connectionHandle: UInt16
        public var rssi: Int8
        public init(connectionHandle: UInt16, rssi: Int8) {
            self.connectionHandle = connectionHandle
            self.rssi = rssi
        }
        public init(returnParameters r: inout ByteReader) throws {
            connectionHandle = try r.readUInt16("Handle")
            rssi = try r.readInt8("RSSI")
        }
        public func encode(into w: inout ByteWriter) { w.write(connectionHandle); w.write(rssi) }
    }
}

/// Return parameters that carry only a Connection_Handle (LE Set Data Length, LTK replies).
public struct HCIConnectionHandleReturn: HCIReturnParameters {
    public var connectionHandle: UInt16
    public init(connectionHandle: UInt16) { self.connectionHandle = connectionHandle }
    public init(returnParameters r: inout ByteReader) throws { connectionHandle = try r.readUInt16("Connection_Handle") }
    public func encode(into w: inout ByteWriter) { w.write(connectionHandle) }
}

/// Return parameters that carry one octet (list sizes, set counts, Tx power).
public struct HCIOctetReturn: HCIReturnParameters {
    public var value: UInt8
    public init(value: UInt8) { self.value = value }
    public init(returnParameters r: inout ByteReader) throws { value = try r.readUInt8("value") }
    public func encode(into w: inout ByteWriter) { w.write(value) }
    /// The octet read as a signed value (Tx power levels in dBm).
    public var signedValue: Int8 { Int8(bitPattern: value) }
}
