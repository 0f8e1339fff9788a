// HCI error codes (Core Specification v5.4, Vol 1, Part F, §1.3). Every code has its
// specification name; unknown codes survive and print as "unknown 0x..".

public struct HCIStatus: RawRepresentable, Hashable, Sendable, CustomStringConvertible, Error {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let success = HCIStatus(rawValue: 0x00)
    public static let unknownCommand = HCIStatus(rawValue: 0x01)
    public static let unknownConnectionIdentifier = HCIStatus(rawValue: 0x02)
    /// PIN or Key Missing: the peripheral's host has no key for this link (LTK negative reply).
    public static let pinOrKeyMissing = HCIStatus(rawValue: 0x06)
    public static let memoryCapacityExceeded = HCIStatus(rawValue: 0x07)
    /// Connection Timeout: the link's supervision timeout ran out (the peer fell silent).
    public static let connectionTimeout = HCIStatus(rawValue: 0x08)
    /// Connection Already Exists: also a Create Sync for a train already synchronised to (§7.8.67).
    public static let connectionAlreadyExists = HCIStatus(rawValue: 0x0B)
    public static let commandDisallowed = HCIStatus(rawValue: 0x0C)
    public static let unsupportedFeatureOrParameterValue = HCIStatus(rawValue: 0x11)
    public static let invalidCommandParameters = HCIStatus(rawValue: 0x12)
    public static let remoteUserTerminatedConnection = HCIStatus(rawValue: 0x13)
    /// Remote Device Terminated Connection due to Low Resources: what a host that can
    /// no longer keep up with a link tells its peer.
    public static let remoteDeviceTerminatedConnectionDueToLowResources = HCIStatus(rawValue: 0x14)
    public static let connectionTerminatedByLocalHost = HCIStatus(rawValue: 0x16)
    public static let unspecifiedError = HCIStatus(rawValue: 0x1F)
    /// Connection Terminated due to MIC Failure: the two sides' keys differ.
    public static let connectionTerminatedDueToMICFailure = HCIStatus(rawValue: 0x3D)
    /// Advertising Timeout: an advertising set's Duration elapsed (§7.7.65.18).
    public static let advertisingTimeout = HCIStatus(rawValue: 0x3C)
    /// Connection Failed to be Established: the link's first packets went unanswered
    /// (Vol 6, Part B, §4.5.2).
    public static let connectionFailedToBeEstablished = HCIStatus(rawValue: 0x3E)
    public static let unknownAdvertisingIdentifier = HCIStatus(rawValue: 0x42)
    /// Limit Reached: an advertising set sent its Max_Extended_Advertising_Events (§7.7.65.18).
    public static let limitReached = HCIStatus(rawValue: 0x43)
    public static let operationCancelledByHost = HCIStatus(rawValue: 0x44)
    public static let packetTooLong = HCIStatus(rawValue: 0x45)

    public var isSuccess: Bool { rawValue == 0 }

    public var name: String? {
        let i = Int(rawValue)
        return i < Self.names.count ? Self.names[i] : nil
    }

    public var description: String { Self.descriptions[Int(rawValue)] }

    /// "Success (0x00)" for every code, built once (decoders describe a status per frame).
    private static let descriptions: [String] = (0...255).map { code in
        "\(HCIStatus(rawValue: UInt8(code)).name ?? "unknown") (0x\(hex2(UInt8(code))))"
    }

    /// Names from Vol 1, Part F, §1.3, indexed by code.
    static let names: [String?] = [
        "Success",  // 0x00
        "Unknown HCI Command",
        "Unknown Connection Identifier",
        "Hardware Failure",
        "Page Timeout",
        "Authentication Failure",
        "PIN or Key Missing",
        "Memory Capacity Exceeded",
        "Connection Timeout",
        "Connection Limit Exceeded",
        "Synchronous Connection Limit To A Device Exceeded",  // 0x0A
        "Connection Already Exists",
        "Command Disallowed",
        "Connection Rejected due to Limited Resources",
        "Connection Rejected Due To Security Reasons",
        "Connection Rejected due to Unacceptable BD_ADDR",
        "Connection Accept Timeout Exceeded",  // 0x10
        "Unsupported Feature or Parameter Value",
        "Invalid HCI Command Parameters",
        "Remote User Terminated Connection",
        "Remote Device Terminated Connection due to Low Resources",
        "Remote Device Terminated Connection due to Power Off",
        "Connection Terminated By Local Host",
        "Repeated Attempts",
        "Pairing Not Allowed",
        "Unknown LMP PDU",
        "Unsupported Remote Feature",  // 0x1A
        "SCO Offset Rejected",
        "SCO Interval Rejected",
        "SCO Air Mode Rejected",
        "Invalid LMP Parameters / Invalid LL Parameters",
        "Unspecified Error",
        "Unsupported LMP Parameter Value / Unsupported LL Parameter Value",  // 0x20
        "Role Change Not Allowed",
        "LMP Response Timeout / LL Response Timeout",
        "LMP Error Transaction Collision / LL Procedure Collision",
        "LMP PDU Not Allowed",
        "Encryption Mode Not Acceptable",
        "Link Key cannot be Changed",
        "Requested QoS Not Supported",
        "Instant Passed",
        "Pairing With Unit Key Not Supported",
        "Different Transaction Collision",  // 0x2A
        nil,  // 0x2B reserved
        "QoS Unacceptable Parameter",
        "QoS Rejected",
        "Channel Classification Not Supported",
        "Insufficient Security",
        "Parameter Out Of Mandatory Range",  // 0x30
        nil,  // 0x31 reserved
        "Role Switch Pending",
        nil,  // 0x33 reserved
        "Reserved Slot Violation",
        "Role Switch Failed",
        "Extended Inquiry Response Too Large",
        "Secure Simple Pairing Not Supported By Host",
        "Host Busy - Pairing",
        "Connection Rejected due to No Suitable Channel Found",
        "Controller Busy",  // 0x3A
        "Unacceptable Connection Parameters",
        "Advertising Timeout",
        "Connection Terminated due to MIC Failure",
        "Connection Failed to be Established / Synchronization Timeout",
        "Previously Used",
        "Coarse Clock Adjustment Rejected but Will Try to Adjust Using Clock Dragging",  // 0x40
        "Type0 Submap Not Defined",
        "Unknown Advertising Identifier",
        "Limit Reached",
        "Operation Cancelled by Host",
        "Packet Too Long",
        "Too Late",
        "Too Early",
        "Insufficient Channels",  // 0x48
    ]
}
