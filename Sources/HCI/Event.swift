// HCI events (Core Specification v5.4, Vol 4, Part E, §7.7).
//
// `HCIEvent(code:parameters:)` decodes the events the LE host works with into
// typed values; every other code becomes `.unknown` and re-encodes byte for byte.
// Parameters longer than a known event's layout are accepted (later versions of
// the specification append fields); shorter ones throw `DecodeError.truncated`.

/// A typed event parameter block.
public protocol HCIEventParameters: Sendable, Hashable, FieldListing {
    init(parameters r: inout ByteReader) throws
    func encode(into w: inout ByteWriter)
}

public enum HCIEvent: Hashable, Sendable {
    case commandComplete(CommandComplete)
    case commandStatus(CommandStatus)
    case disconnectionComplete(DisconnectionComplete)
    case numberOfCompletedPackets(NumberOfCompletedPackets)
    case encryptionChange(EncryptionChange)
    case encryptionChangeV2(EncryptionChangeV2)
    case encryptionKeyRefreshComplete(EncryptionKeyRefreshComplete)
    case readRemoteVersionInformationComplete(ReadRemoteVersionInformationComplete)
    case hardwareError(HardwareError)
    case dataBufferOverflow(DataBufferOverflow)
    case le(LEMetaEvent)
    case unknown(code: HCIEventCode, parameters: [UInt8])

    public init(code: HCIEventCode, parameters: [UInt8]) throws {
        var r = ByteReader(parameters, context: code.description)
        switch code {
        case .commandComplete: self = .commandComplete(try CommandComplete(parameters: &r))
        case .commandStatus: self = .commandStatus(try CommandStatus(parameters: &r))
        case .disconnectionComplete: self = .disconnectionComplete(try DisconnectionComplete(parameters: &r))
        case .numberOfCompletedPackets: self = .numberOfCompletedPackets(try NumberOfCompletedPackets(parameters: &r))
        case .encryptionChange: self = .encryptionChange(try EncryptionChange(parameters: &r))
        case .encryptionChangeV2: self = .encryptionChangeV2(try EncryptionChangeV2(parameters: &r))
        case .encryptionKeyRefreshComplete:
            self = .encryptionKeyRefreshComplete(try EncryptionKeyRefreshComplete(parameters: &r))
        case .readRemoteVersionInformationComplete:
            self = .readRemoteVersionInformationComplete(try ReadRemoteVersionInformationComplete(parameters: &r))
        case .hardwareError: self = .hardwareError(try HardwareError(parameters: &r))
        case .dataBufferOverflow: self = .dataBufferOverflow(try DataBufferOverflow(parameters: &r))
        case .leMeta: self = .le(try LEMetaEvent(parameters: &r))
        default: self = .unknown(code: code, parameters: parameters)
        }
    }

    /// Decodes an event packet; other packet types throw.
    public init(_ packet: HCIPacket) throws {
        guard case let .event(code, parameters) = packet else {
            throw DecodeError.invalidValue(what: "HCI event packet type", value: Int(packet.type.rawValue))
        }
        try self.init(code: code, parameters: parameters)
    }

    public var code: HCIEventCode {
        switch self {
        case .commandComplete: return .commandComplete
        case .commandStatus: return .commandStatus
        case .disconnectionComplete: return .disconnectionComplete
        case .numberOfCompletedPackets: return .numberOfCompletedPackets
        case .encryptionChange: return .encryptionChange
        case .encryptionChangeV2: return .encryptionChangeV2
        case .encryptionKeyRefreshComplete: return .encryptionKeyRefreshComplete
        case .readRemoteVersionInformationComplete: return .readRemoteVersionInformationComplete
        case .hardwareError: return .hardwareError
        case .dataBufferOverflow: return .dataBufferOverflow
        case .le: return .leMeta
        case let .unknown(code, _): return code
        }
    }

    public var parameters: [UInt8] {
        var w = ByteWriter()
        switch self {
        case let .commandComplete(e): e.encode(into: &w)
        case let .commandStatus(e): e.encode(into: &w)
        case let .disconnectionComplete(e): e.encode(into: &w)
        case let .numberOfCompletedPackets(e): e.encode(into: &w)
        case let .encryptionChange(e): e.encode(into: &w)
        case let .encryptionChangeV2(e): e.encode(into: &w)
        case let .encryptionKeyRefreshComplete(e): e.encode(into: &w)
        case let .readRemoteVersionInformationComplete(e): e.encode(into: &w)
        case let .hardwareError(e): e.encode(into: &w)
        case let .dataBufferOverflow(e): e.encode(into: &w)
        case let .le(e): e.encode(into: &w)
        case let .unknown(_, p): w.write(contentsOf: p)
        }
        return w.bytes
    }

    public var packet: HCIPacket { .event(code: code, parameters: parameters) }
}

/// Command Complete (§7.7.14). `returnParameters` starts with Status for every
/// command this stack sends (all but NOP).
public struct CommandComplete: HCIEventParameters {
    public var numHCICommandPackets: UInt8
    public var commandOpcode: HCIOpcode
    public var returnParameters: [UInt8]
    public init(numHCICommandPackets: UInt8 = 1, commandOpcode: HCIOpcode, returnParameters: [UInt8]) {
        self.numHCICommandPackets = numHCICommandPackets
        self.commandOpcode = commandOpcode
        self.returnParameters = returnParameters
    }
    /// A success with typed return parameters (for scripted controllers and tests).
    public init<R: HCIReturnParameters>(numHCICommandPackets: UInt8 = 1, commandOpcode: HCIOpcode, status: HCIStatus = .success, returning r: R) {
        var w = ByteWriter()
        w.write(status.rawValue)
        r.encode(into: &w)
        self.init(numHCICommandPackets: numHCICommandPackets, commandOpcode: commandOpcode, returnParameters: w.bytes)
    }
    public init(parameters r: inout ByteReader) throws {
        numHCICommandPackets = try r.readUInt8("Num_HCI_Command_Packets")
        commandOpcode = HCIOpcode(rawValue: try r.readUInt16("Command_Opcode"))
        returnParameters = r.readRemaining()
    }
    public func encode(into w: inout ByteWriter) {
        w.write(numHCICommandPackets); w.write(commandOpcode.rawValue); w.write(contentsOf: returnParameters)
    }
    /// The first return parameter, when present.
    public var status: HCIStatus? { returnParameters.first.map(HCIStatus.init(rawValue:)) }
}

/// Command Status (§7.7.15).
public struct CommandStatus: HCIEventParameters {
    public var status: HCIStatus
    public var numHCICommandPackets: UInt8
    public var commandOpcode: HCIOpcode
    public init(status: HCIStatus, numHCICommandPackets: UInt8 = 1, commandOpcode: HCIOpcode) {
        self.status = status
        self.numHCICommandPackets = numHCICommandPackets
        self.commandOpcode = commandOpcode
    }
    public init(parameters r: inout ByteReader) throws {
        status = HCIStatus(rawValue: try r.readUInt8("Status"))
        numHCICommandPackets = try r.readUInt8("Num_HCI_Command_Packets")
        commandOpcode = HCIOpcode(rawValue: try r.readUInt16("Command_Opcode"))
    }
    public func encode(into w: inout ByteWriter) {
        w.write(status.rawValue); w.write(numHCICommandPackets); w.write(commandOpcode.rawValue)
    }
}

/// Disconnection Complete (§7.7.5).
public struct DisconnectionComplete: HCIEventParameters {
    public var status: HCIStatus
    public var connectionHandle: UInt16
    public var reason: HCIStatus
    public init(status: HCIStatus = .success, connectionHandle: UInt16, reason: HCIStatus) {
        self.status = status
        self.connectionHandle = connectionHandle
        self.reason = reason
    }
    public init(parameters r: inout ByteReader) throws {
        status = HCIStatus(rawValue: try r.readUInt8("Status"))
        connectionHandle = try r.readUInt16("Connection_Handle") & 0x0FFF
        reason = HCIStatus(rawValue: try r.readUInt8("Reason"))
    }
    public func encode(into w: inout ByteWriter) { w.write(status.rawValue); w.write(connectionHandle); w.write(reason.rawValue) }
}

/// Number Of Completed Packets (§7.7.19): (handle, count) pairs, interleaved on the wire.
public struct NumberOfCompletedPackets: HCIEventParameters {
    public struct Entry: Hashable, Sendable {
        public var connectionHandle: UInt16
        public var numCompletedPackets: UInt16
        public init(connectionHandle: UInt16, numCompletedPackets: UInt16) {
            self.connectionHandle = connectionHandle
            self.numCompletedPackets = numCompletedPackets
        }
    }
    public var entries: [Entry]
    public init(entries: [Entry]) { self.entries = entries }
    public init(parameters r: inout ByteReader) throws {
        let n = Int(try r.readUInt8("Num_Handles"))
        var entries: [Entry] = []
        entries.reserveCapacity(n)
        for _ in 0..<n {
            entries.append(Entry(
                connectionHandle: try r.readUInt16("Connection_Handle") & 0x0FFF,
                numCompletedPackets: try r.readUInt16("Num_Completed_Packets")))
        }
        self.entries = entries
    }
    public func encode(into w: inout ByteWriter) {
        w.write(UInt8(truncatingIfNeeded: entries.count))
        for e in entries { w.write(e.connectionHandle); w.write(e.numCompletedPackets) }
    }
}

/// Encryption Change [v2] (§7.7.8): as v1, with the key size the link is encrypted
/// with. Sent instead of v1 once Set Event Mask Page 2 enables it.
public struct EncryptionChangeV2: HCIEventParameters {
    public var status: HCIStatus
    public var connectionHandle: UInt16
    /// 0x00 off, 0x01 on (E0 or AES-CCM), 0x02 on with AES-CCM (BR/EDR).
    public var encryptionEnabled: UInt8
    /// Octets, 1...16 (0 while encryption is off).
    public var encryptionKeySize: UInt8
    public init(status: HCIStatus = .success, connectionHandle: UInt16, encryptionEnabled: UInt8, encryptionKeySize: UInt8) {
        self.status = status
        self.connectionHandle = connectionHandle
        self.encryptionEnabled = encryptionEnabled
        self.encryptionKeySize = encryptionKeySize
    }
    public init(parameters r: inout ByteReader) throws {
        status = HCIStatus(rawValue: try r.readUInt8("Status"))
        connectionHandle = try r.readUInt16("Connection_Handle") & 0x0FFF
        encryptionEnabled = try r.readUInt8("Encryption_Enabled")
        encryptionKeySize = try r.readUInt8("Encryption_Key_Size")
    }
    public func encode(into w: inout ByteWriter) {
        w.write(status.rawValue); w.write(connectionHandle); w.write(encryptionEnabled); w.write(encryptionKeySize)
    }
}

/// Encryption Change [v1] (§7.7.8).
public struct EncryptionChange: HCIEventParameters {
    public var status: HCIStatus
    public var connectionHandle: UInt16
    /// 0x00 off, 0x01 on (E0 or AES-CCM), 0x02 on with AES-CCM (BR/EDR).
    public var encryptionEnabled: UInt8
    public init(status: HCIStatus = .success, connectionHandle: UInt16, encryptionEnabled: UInt8) {
        self.status = status
        self.connectionHandle = connectionHandle
        self.encryptionEnabled = encryptionEnabled
    }
    public init(parameters r: inout ByteReader) throws {
        status = HCIStatus(rawValue: try r.readUInt8("Status"))
        connectionHandle = try r.readUInt16("Connection_Handle") & 0x0FFF
        encryptionEnabled = try r.readUInt8("Encryption_Enabled")
    }
    public func encode(into w: inout ByteWriter) { w.write(status.rawValue); w.write(connectionHandle); w.write(encryptionEnabled) }
}

/// Encryption Key Refresh Complete (§7.7.39).
public struct EncryptionKeyRefreshComplete: HCIEventParameters {
    public var status: HCIStatus
    public var connectionHandle: UInt16
    public init(status: HCIStatus = .success, connectionHandle: UInt16) {
        self.status = status
        self.connectionHandle = connectionHandle
    }
    public init(parameters r: inout ByteReader) throws {
        status = HCIStatus(rawValue: try r.readUInt8("Status"))
        connectionHandle = try r.readUInt16("Connection_Handle") & 0x0FFF
    }
    public func encode(into w: inout ByteWriter) { w.write(status.rawValue); w.write(connectionHandle) }
}

/// Read Remote Version Information Complete (§7.7.12).
public struct ReadRemoteVersionInformationComplete: HCIEventParameters {
    public var status: HCIStatus
    public var connectionHandle: UInt16
    public var version: UInt8
    public var companyIdentifier: UInt16
    public var subversion: UInt16
    public init(status: HCIStatus = .success, connectionHandle: UInt16, version: UInt8, companyIdentifier: UInt16, subversion: UInt16) {
        self.status = status
        self.connectionHandle = connectionHandle
        self.version = version
        self.companyIdentifier = companyIdentifier
        self.subversion = subversion
    }
    public init(parameters r: inout ByteReader) throws {
        status = HCIStatus(rawValue: try r.readUInt8("Status"))
        connectionHandle = try r.readUInt16("Connection_Handle") & 0x0FFF
        version = try r.readUInt8("Version")
        companyIdentifier = try r.readUInt16("Company_Identifier")
        subversion = try r.readUInt16("Subversion")
    }
    public func encode(into w: inout ByteWriter) {
        w.write(status.rawValue); w.write(connectionHandle); w.write(version); w.write(companyIdentifier); w.write(subversion)
    }
}

/// Hardware Error (§7.7.16).
public struct HardwareError: HCIEventParameters {
    public var hardwareCode: UInt8
    public init(hardwareCode: UInt8) { self.hardwareCode = hardwareCode }
    public init(parameters r: inout ByteReader) throws { hardwareCode = try r.readUInt8("Hardware_Code") }
    public func encode(into w: inout ByteWriter) { w.write(hardwareCode) }
}

/// Data Buffer Overflow (§7.7.26).
public struct DataBufferOverflow: HCIEventParameters {
    /// 0x00 synchronous, 0x01 ACL.
    public var linkType: UInt8
    public init(linkType: UInt8) { self.linkType = linkType }
    public init(parameters r: inout ByteReader) throws { linkType = try r.readUInt8("Link_Type") }
    public func encode(into w: inout ByteWriter) { w.write(linkType) }
}
