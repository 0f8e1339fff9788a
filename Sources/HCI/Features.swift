// What a controller says it supports: the Supported_Commands bit mask (Core
// Specification v5.4, Vol 4, Part E, §6.27), LE feature bits (Vol 6, Part B, §4.6),
// version numbers (Assigned Numbers §2.1) and company identifiers.

/// The 64-octet Supported_Commands mask with lookups by opcode.
public struct SupportedCommands: Hashable, Sendable {
    public var bytes: [UInt8]
    public init(bytes: [UInt8]) { self.bytes = bytes }

    /// The 64-octet mask a controller that implements `opcodes` answers with: each
    /// command's §6.27 bit set (a command without one is left out).
    public init(claiming opcodes: some Sequence<HCIOpcode>) {
        var bytes = [UInt8](repeating: 0, count: 64)
        for op in opcodes {
            if let bit = Self.bitByOpcode[op.rawValue] { bytes[Int(bit / 8)] |= 1 << UInt8(bit % 8) }
        }
        self.bytes = bytes
    }

    /// Whether the controller claims the command; nil if the command has no bit this stack knows.
    public func supports(_ opcode: HCIOpcode) -> Bool? {
        guard let bit = Self.bitByOpcode[opcode.rawValue] else { return nil }
        return claims(bit: Int(bit))
    }

    /// Whether bit `bit` (octet × 8 + bit in octet) of the mask is set.
    public func claims(bit: Int) -> Bool {
        bit >= 0 && bit / 8 < bytes.count && bytes[bit / 8] & (1 << UInt8(bit % 8)) != 0
    }

    /// Number of bits set across the whole mask.
    public var count: Int { bytes.reduce(0) { $0 + $1.nonzeroBitCount } }

    /// The set bits (octet × 8 + bit in octet), in order.
    public var claimedBits: [Int] { (0..<bytes.count * 8).filter(claims(bit:)) }

    /// Every command the mask claims, in bit order (`claimedBits`): its name, or
    /// "unknown command" for a set bit this stack has no command for.
    public var claimedNames: [String] {
        claimedBits.map { bit in
            guard let i = Self.indexByBit[UInt16(bit)] else { return "unknown command" }
            return HCIOpcode(rawValue: Self.assigned[i].opcode).description
        }
    }

    /// Known commands the mask claims that this stack sends, by name.
    public var supportedNames: [String] {
        Self.bits.keys.filter { supports($0) == true }.compactMap(\.name).sorted()
    }

    /// The commands this stack sends (the LE host's set), with their (octet, bit).
    public static let bits: [HCIOpcode: (Int, Int)] = {
        let sent: [HCIOpcode] = [
        .disconnect, .readRemoteVersionInformation, .readLocalName, .setEventMask, .reset, .setEventMaskPage2,
        .writeLEHostSupport, .readLocalVersionInformation, .readLocalSupportedFeatures, .readBufferSize, .readBDADDR,
        .readRSSI, .leSetEventMask, .leReadBufferSize, .leReadLocalSupportedFeatures, .leSetRandomAddress,
        .leSetAdvertisingParameters, .leReadAdvertisingPhysicalChannelTxPower, .leSetAdvertisingData,
        .leSetScanResponseData, .leSetAdvertisingEnable, .leSetScanParameters, .leSetScanEnable, .leCreateConnection,
        .leCreateConnectionCancel, .leReadFilterAcceptListSize, .leClearFilterAcceptList,
        .leAddDeviceToFilterAcceptList, .leRemoveDeviceFromFilterAcceptList, .leConnectionUpdate,
        .leReadRemoteFeatures, .leEncrypt, .leRand, .leEnableEncryption, .leLongTermKeyRequestReply,
        .leLongTermKeyRequestNegativeReply, .leReadSupportedStates, .leAddDeviceToResolvingList,
        .leRemoveDeviceFromResolvingList, .leClearResolvingList, .leReadResolvingListSize,
        .leSetAddressResolutionEnable, .leSetPrivacyMode, .leSetDataLength, .leReadSuggestedDefaultDataLength,
        .leWriteSuggestedDefaultDataLength, .leReadMaximumDataLength, .leReadPHY, .leSetDefaultPHY, .leSetPHY,
        .leSetAdvertisingSetRandomAddress, .leSetExtendedAdvertisingParameters, .leSetExtendedAdvertisingData,
        .leSetExtendedScanResponseData, .leSetExtendedAdvertisingEnable, .leReadMaximumAdvertisingDataLength,
        .leReadNumberOfSupportedAdvertisingSets, .leRemoveAdvertisingSet, .leClearAdvertisingSets,
        .leSetPeriodicAdvertisingParameters, .leSetPeriodicAdvertisingData, .leSetPeriodicAdvertisingEnable,
        .leSetExtendedScanParameters, .leSetExtendedScanEnable, .leExtendedCreateConnection,
        .lePeriodicAdvertisingCreateSync, .lePeriodicAdvertisingCreateSyncCancel, .lePeriodicAdvertisingTerminateSync,
        .leAddDeviceToPeriodicAdvertiserList, .leRemoveDeviceFromPeriodicAdvertiserList,
        .leClearPeriodicAdvertiserList, .leReadPeriodicAdvertiserListSize, .leReadBufferSizeV2,
        ]
        return Dictionary(uniqueKeysWithValues: sent.compactMap { op in bitByOpcode[op.rawValue].map { (op, (Int($0 / 8), Int($0 % 8))) } })
    }()

    static let bitByOpcode: [UInt16: UInt16] = Dictionary(assigned.map { ($0.opcode, $0.bit) }, uniquingKeysWith: { a, _ in a })
    static let indexByBit: [UInt16: Int] = Dictionary(assigned.indices.map { (assigned[$0].bit, $0) }, uniquingKeysWith: { a, _ in a })
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

/// LE Supported States (§7.8.27): bit n set means the controller can be in state or
/// combination of states n at once. Bits 42–63 are reserved.
public struct LESupportedStates: Hashable, Sendable {
    public var rawValue: UInt64
    public init(rawValue: UInt64) { self.rawValue = rawValue }

    public func contains(bit: Int) -> Bool { bit >= 0 && bit < 64 && rawValue & (1 << UInt64(bit)) != 0 }

    /// The set bits, in order.
    public var claimedBits: [Int] { (0..<64).filter(contains(bit:)) }

    /// Bit `bit`'s state or combination ("Scannable Advertising + Passive Scanning");
    /// nil for a reserved bit.
    public static func name(ofBit bit: Int) -> String? {
        bit >= 0 && bit < bitNames.count ? bitNames[bit] : nil
    }

    /// How many of §7.8.27's states and combinations the mask claims, naming the defined
    /// ones it does not (most controllers claim all or nearly all) and any reserved bit
    /// it sets: "40 of 42 defined; not: A, B; reserved bits set: 50".
    public var summary: String {
        let missing = Self.definedBits.filter { !contains(bit: $0) }.map { Self.bitNames[$0] }
        let reserved = claimedBits.filter { !Self.definedBits.contains($0) }
        var text = "\(Self.definedBits.count - missing.count) of \(Self.definedBits.count) defined"
        if !missing.isEmpty { text += "; not: " + missing.joined(separator: ", ") }
        if !reserved.isEmpty { text += "; reserved bits set: " + reserved.map(String.init).joined(separator: ", ") }
        return text
    }

    /// The bits §7.8.27 defines (0–41).
    public static var definedBits: Range<Int> { 0..<bitNames.count }

    /// §7.8.27's table. Bit 6 is both the Initiating state and the Connection state in
    /// the Central role; the combinations are "X + Y".
    static let bitNames: [String] = {
        let (nonconnectable, scannable, connectable) = ("Non-connectable Advertising", "Scannable Advertising", "Connectable Advertising")
        let (high, low) = ("High Duty Cycle Directed Advertising", "Low Duty Cycle Directed Advertising")
        let (passive, active, initiating) = ("Passive Scanning", "Active Scanning", "Initiating")
        let (central, peripheral) = ("Connection (Central Role)", "Connection (Peripheral Role)")
        func and(_ a: String, _ b: String) -> String { a + " + " + b }
        return [
            nonconnectable, scannable, connectable, high, passive, active, initiating + " / " + central, peripheral,
            and(nonconnectable, passive), and(scannable, passive), and(connectable, passive), and(high, passive),
            and(nonconnectable, active), and(scannable, active), and(connectable, active), and(high, active),
            and(nonconnectable, initiating), and(scannable, initiating), and(nonconnectable, central), and(scannable, central),
            and(nonconnectable, peripheral), and(scannable, peripheral), and(passive, initiating), and(active, initiating),
            and(passive, central), and(active, central), and(passive, peripheral), and(active, peripheral),
            and(initiating, central), low, and(low, passive), and(low, active),
            and(connectable, initiating), and(high, initiating), and(low, initiating),
            and(connectable, central), and(high, central), and(low, central),
            and(connectable, peripheral), and(high, peripheral), and(low, peripheral), and(initiating, peripheral),
        ]
    }()
}
