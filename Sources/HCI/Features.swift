// What a controller says it supports: the Supported_Commands bit mask (Core
// Specification v5.4, Vol 4, Part E, §6.27), LE feature bits (Vol 6, Part B, §4.6),
// version numbers (Assigned Numbers §2.1) and company identifiers.

/// The 64-octet Supported_Commands mask with lookups by opcode.
public struct SupportedCommands: Hashable, Sendable {
    public var bytes: [UInt8]
    public init(bytes: [UInt8]) { self.bytes = bytes }

    /// Whether the controller claims the command; nil if this stack does not know the command's bit.
    public func supports(_ opcode: HCIOpcode) -> Bool? {
        guard let (octet, bit) = Self.bits[opcode] else { return nil }
        guard octet < bytes.count else { return false }
        return bytes[octet] & (1 << bit) != 0
    }

    /// Number of bits set across the whole mask.
    public var count: Int { bytes.reduce(0) { $0 + $1.nonzeroBitCount } }

    /// Known commands the mask claims, by name.
    public var supportedNames: [String] {
        Self.bits.keys.filter { supports($0) == true }.compactMap(\.name).sorted()
    }

    /// (octet, bit) of each command this stack sends, from §6.27's table.
    public static let bits: [HCIOpcode: (Int, Int)] = [
        .disconnect: (0, 5), .readRemoteVersionInformation: (2, 7), .readLocalName: (7, 1),
        .setEventMask: (5, 6), .reset: (5, 7), .setEventMaskPage2: (22, 2), .writeLEHostSupport: (24, 6),
        .readLocalVersionInformation: (14, 3), .readLocalSupportedFeatures: (14, 5), .readBufferSize: (14, 7),
        .readBDADDR: (15, 1), .readRSSI: (15, 5),
        .leSetEventMask: (25, 0), .leReadBufferSize: (25, 1), .leReadLocalSupportedFeatures: (25, 2),
        .leSetRandomAddress: (25, 4), .leSetAdvertisingParameters: (25, 5),
        .leReadAdvertisingPhysicalChannelTxPower: (25, 6), .leSetAdvertisingData: (25, 7),
        .leSetScanResponseData: (26, 0), .leSetAdvertisingEnable: (26, 1), .leSetScanParameters: (26, 2),
        .leSetScanEnable: (26, 3), .leCreateConnection: (26, 4), .leCreateConnectionCancel: (26, 5),
        .leReadFilterAcceptListSize: (26, 6), .leClearFilterAcceptList: (26, 7),
        .leAddDeviceToFilterAcceptList: (27, 0), .leRemoveDeviceFromFilterAcceptList: (27, 1),
        .leConnectionUpdate: (27, 2), .leReadRemoteFeatures: (27, 5), .leEncrypt: (27, 6), .leRand: (27, 7),
        .leEnableEncryption: (28, 0), .leLongTermKeyRequestReply: (28, 1),
        .leLongTermKeyRequestNegativeReply: (28, 2), .leReadSupportedStates: (28, 3),
        .leAddDeviceToResolvingList: (34, 3), .leRemoveDeviceFromResolvingList: (34, 4), .leClearResolvingList: (34, 5),
        .leReadResolvingListSize: (34, 6), .leSetAddressResolutionEnable: (35, 1), .leSetPrivacyMode: (39, 2),
        .leSetDataLength: (33, 6), .leReadSuggestedDefaultDataLength: (33, 7),
        .leWriteSuggestedDefaultDataLength: (34, 0), .leReadMaximumDataLength: (35, 3), .leReadPHY: (35, 4),
        .leSetDefaultPHY: (35, 5), .leSetPHY: (35, 6), .leSetAdvertisingSetRandomAddress: (36, 1),
        .leSetExtendedAdvertisingParameters: (36, 2), .leSetExtendedAdvertisingData: (36, 3),
        .leSetExtendedScanResponseData: (36, 4), .leSetExtendedAdvertisingEnable: (36, 5),
        .leReadMaximumAdvertisingDataLength: (36, 6), .leReadNumberOfSupportedAdvertisingSets: (36, 7),
        .leRemoveAdvertisingSet: (37, 0), .leClearAdvertisingSets: (37, 1), .leSetPeriodicAdvertisingParameters: (37, 2),
        .leSetPeriodicAdvertisingData: (37, 3), .leSetPeriodicAdvertisingEnable: (37, 4), .leSetExtendedScanParameters: (37, 5),
        .leSetExtendedScanEnable: (37, 6), .leExtendedCreateConnection: (37, 7), .lePeriodicAdvertisingCreateSync: (38, 0),
        .lePeriodicAdvertisingCreateSyncCancel: (38, 1), .lePeriodicAdvertisingTerminateSync: (38, 2),
        .leAddDeviceToPeriodicAdvertiserList: (38, 3), .leRemoveDeviceFromPeriodicAdvertiserList: (38, 4),
        .leClearPeriodicAdvertiserList: (38, 5), .leReadPeriodicAdvertiserListSize: (38, 6), .leReadBufferSizeV2: (41, 5),
    ]
}

/// LE feature bits (Vol 6, Part B, §4.6).
public struct LEFeatures: Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt64
    public init(rawValue: UInt64) { self.rawValue = rawValue }

    public func contains(bit: Int) -> Bool { bit < 64 && rawValue & (1 << UInt64(bit)) != 0 }

    public static let encryption = 0
    public static let connectionParametersRequest = 1
    public static let dataPacketLengthExtension = 5
    public static let privacy = 6
    public static let le2MPHY = 8
    public static let leCodedPHY = 11
    public static let extendedAdvertising = 12
    public static let periodicAdvertising = 13
    public static let channelSelectionAlgorithm2 = 14

    public var names: [String] {
        (0..<64).filter { contains(bit: $0) }.map { $0 < Self.bitNames.count ? Self.bitNames[$0] : "bit \($0)" }
    }

    public var description: String { names.joined(separator: ", ") }

    static let bitNames = [
        "LE Encryption", "Connection Parameters Request Procedure", "Extended Reject Indication",
        "Peripheral-initiated Features Exchange", "LE Ping", "LE Data Packet Length Extension", "LL Privacy",
        "Extended Scanning Filter Policies", "LE 2M PHY", "Stable Modulation Index - Transmitter",
        "Stable Modulation Index - Receiver", "LE Coded PHY", "LE Extended Advertising", "LE Periodic Advertising",
        "Channel Selection Algorithm #2", "LE Power Class 1", "Minimum Number of Used Channels Procedure",
        "Connection CTE Request", "Connection CTE Response", "Connectionless CTE Transmitter",
        "Connectionless CTE Receiver", "Antenna Switching During CTE Transmission (AoD)",
        "Antenna Switching During CTE Reception (AoA)", "Receiving Constant Tone Extensions",
        "Periodic Advertising Sync Transfer - Sender", "Periodic Advertising Sync Transfer - Recipient",
        "Sleep Clock Accuracy Updates", "Remote Public Key Validation", "Connected Isochronous Stream - Central",
        "Connected Isochronous Stream - Peripheral", "Isochronous Broadcaster", "Synchronized Receiver",
        "Connected Isochronous Stream (Host Support)", "LE Power Control Request", "LE Power Control Request",
        "LE Path Loss Monitoring", "Periodic Advertising ADI support", "Connection Subrating",
        "Connection Subrating (Host Support)", "Channel Classification", "Advertising Coding Selection",
        "Advertising Coding Selection (Host Support)", "Decision-Based Advertising Filtering",
        "Periodic Advertising with Responses - Advertiser", "Periodic Advertising with Responses - Scanner",
        "Unsegmented Framed Mode", "Channel Sounding", "Channel Sounding (Host Support)",
    ]
}

/// Bluetooth Core Specification version numbers used by HCI_Version and LMP_Version.
public enum CoreVersion {
    public static func name(_ v: UInt8) -> String {
        let names = ["1.0b", "1.1", "1.2", "2.0+EDR", "2.1+EDR", "3.0+HS", "4.0", "4.1", "4.2", "5.0", "5.1",
                     "5.2", "5.3", "5.4", "6.0", "6.1"]
        return Int(v) < names.count ? names[Int(v)] : "unknown (\(v))"
    }
}

/// Company identifiers (Assigned Numbers §7.1). A hand-picked subset: the controller
/// vendors a Linux host meets; every other value prints as its number.
public enum CompanyIdentifier {
    /// The company's name from the assigned numbers, or "unknown (0xNNNN)".
    public static func name(_ id: UInt16) -> String {
        AssignedNumbers.companyName(id) ?? "unknown (0x\(hex4(id)))"
    }
}
