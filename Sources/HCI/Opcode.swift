// HCI command opcodes (Core Specification v5.4, Vol 4, Part E, §7): OGF in the top
// 6 bits, OCF in the low 10. An open set: unknown opcodes survive a round trip and
// print as "unknown 0x....".

public struct HCIOpcode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }
    public init(ogf: UInt8, ocf: UInt16) { rawValue = UInt16(ogf & 0x3F) << 10 | (ocf & 0x3FF) }

    public var ogf: UInt8 { UInt8(rawValue >> 10) }
    public var ocf: UInt16 { rawValue & 0x3FF }

    /// The specification's name, or nil for an opcode this stack does not know.
    public var name: String? { Self.names[rawValue] }

    public var description: String {
        name ?? "unknown 0x\(hex4(rawValue))"
    }

    // Link Control (OGF 0x01)
    public static let disconnect = HCIOpcode(ogf: 0x01, ocf: 0x0006)
    public static let readRemoteVersionInformation = HCIOpcode(ogf: 0x01, ocf: 0x001D)
    // Controller & Baseband (OGF 0x03)
    public static let setEventMask = HCIOpcode(ogf: 0x03, ocf: 0x0001)
    public static let reset = HCIOpcode(ogf: 0x03, ocf: 0x0003)
    public static let writeLocalName = HCIOpcode(ogf: 0x03, ocf: 0x0013)
    public static let readLocalName = HCIOpcode(ogf: 0x03, ocf: 0x0014)
    public static let writeLEHostSupport = HCIOpcode(ogf: 0x03, ocf: 0x006D)
    public static let setEventMaskPage2 = HCIOpcode(ogf: 0x03, ocf: 0x0063)
    // Informational (OGF 0x04)
    public static let readLocalVersionInformation = HCIOpcode(ogf: 0x04, ocf: 0x0001)
    public static let readLocalSupportedCommands = HCIOpcode(ogf: 0x04, ocf: 0x0002)
    public static let readLocalSupportedFeatures = HCIOpcode(ogf: 0x04, ocf: 0x0003)
    public static let readBufferSize = HCIOpcode(ogf: 0x04, ocf: 0x0005)
    public static let readBDADDR = HCIOpcode(ogf: 0x04, ocf: 0x0009)
    // Status (OGF 0x05)
    public static let readRSSI = HCIOpcode(ogf: 0x05, ocf: 0x0005)
    // LE Controller (OGF 0x08)
    public static let leSetEventMask = HCIOpcode(ogf: 0x08, ocf: 0x0001)
    public static let leReadBufferSize = HCIOpcode(ogf: 0x08, ocf: 0x0002)
    public static let leReadLocalSupportedFeatures = HCIOpcode(ogf: 0x08, ocf: 0x0003)
    public static let leSetRandomAddress = HCIOpcode(ogf: 0x08, ocf: 0x0005)
    public static let leSetAdvertisingParameters = HCIOpcode(ogf: 0x08, ocf: 0x0006)
    public static let leReadAdvertisingPhysicalChannelTxPower = HCIOpcode(ogf: 0x08, ocf: 0x0007)
    public static let leSetAdvertisingData = HCIOpcode(ogf: 0x08, ocf: 0x0008)
    public static let leSetScanResponseData = HCIOpcode(ogf: 0x08, ocf: 0x0009)
    public static let leSetAdvertisingEnable = HCIOpcode(ogf: 0x08, ocf: 0x000A)
    public static let leSetScanParameters = HCIOpcode(ogf: 0x08, ocf: 0x000B)
    public static let leSetScanEnable = HCIOpcode(ogf: 0x08, ocf: 0x000C)
    public static let leCreateConnection = HCIOpcode(ogf: 0x08, ocf: 0x000D)
    public static let leCreateConnectionCancel = HCIOpcode(ogf: 0x08, ocf: 0x000E)
    public static let leReadFilterAcceptListSize = HCIOpcode(ogf: 0x08, ocf: 0x000F)
    public static let leClearFilterAcceptList = HCIOpcode(ogf: 0x08, ocf: 0x0010)
    public static let leAddDeviceToFilterAcceptList = HCIOpcode(ogf: 0x08, ocf: 0x0011)
    public static let leRemoveDeviceFromFilterAcceptList = HCIOpcode(ogf: 0x08, ocf: 0x0012)
    public static let leConnectionUpdate = HCIOpcode(ogf: 0x08, ocf: 0x0013)
    public static let leReadRemoteFeatures = HCIOpcode(ogf: 0x08, ocf: 0x0016)
    public static let leEncrypt = HCIOpcode(ogf: 0x08, ocf: 0x0017)
    public static let leRand = HCIOpcode(ogf: 0x08, ocf: 0x0018)
    public static let leEnableEncryption = HCIOpcode(ogf: 0x08, ocf: 0x0019)
    public static let leLongTermKeyRequestReply = HCIOpcode(ogf: 0x08, ocf: 0x001A)
    public static let leLongTermKeyRequestNegativeReply = HCIOpcode(ogf: 0x08, ocf: 0x001B)
    public static let leReadSupportedStates = HCIOpcode(ogf: 0x08, ocf: 0x001C)
    public static let leSetDataLength = HCIOpcode(ogf: 0x08, ocf: 0x0022)
    public static let leReadSuggestedDefaultDataLength = HCIOpcode(ogf: 0x08, ocf: 0x0023)
    public static let leWriteSuggestedDefaultDataLength = HCIOpcode(ogf: 0x08, ocf: 0x0024)
    public static let leReadMaximumDataLength = HCIOpcode(ogf: 0x08, ocf: 0x002F)
    public static let leReadPHY = HCIOpcode(ogf: 0x08, ocf: 0x0030)
    public static let leSetDefaultPHY = HCIOpcode(ogf: 0x08, ocf: 0x0031)
    public static let leSetPHY = HCIOpcode(ogf: 0x08, ocf: 0x0032)
    public static let leSetAdvertisingSetRandomAddress = HCIOpcode(ogf: 0x08, ocf: 0x0035)
    public static let leSetExtendedAdvertisingParameters = HCIOpcode(ogf: 0x08, ocf: 0x0036)
    public static let leSetExtendedAdvertisingData = HCIOpcode(ogf: 0x08, ocf: 0x0037)
    public static let leSetExtendedScanResponseData = HCIOpcode(ogf: 0x08, ocf: 0x0038)
    public static let leSetExtendedAdvertisingEnable = HCIOpcode(ogf: 0x08, ocf: 0x0039)
    public static let leReadMaximumAdvertisingDataLength = HCIOpcode(ogf: 0x08, ocf: 0x003A)
    public static let leReadNumberOfSupportedAdvertisingSets = HCIOpcode(ogf: 0x08, ocf: 0x003B)
    public static let leRemoveAdvertisingSet = HCIOpcode(ogf: 0x08, ocf: 0x003C)
    public static let leClearAdvertisingSets = HCIOpcode(ogf: 0x08, ocf: 0x003D)
    public static let leSetExtendedScanParameters = HCIOpcode(ogf: 0x08, ocf: 0x0041)
    public static let leSetExtendedScanEnable = HCIOpcode(ogf: 0x08, ocf: 0x0042)
    public static let leExtendedCreateConnection = HCIOpcode(ogf: 0x08, ocf: 0x0043)
    public static let leReadBufferSizeV2 = HCIOpcode(ogf: 0x08, ocf: 0x0060)
    public static let leExtendedCreateConnectionV2 = HCIOpcode(ogf: 0x08, ocf: 0x0085)

    static let names: [UInt16: String] = {
        var n: [UInt16: String] = [0x0000: "NOP"]
        func add(_ o: HCIOpcode, _ s: String) { n[o.rawValue] = s }
        add(.disconnect, "Disconnect")
        add(.readRemoteVersionInformation, "Read Remote Version Information")
        add(.setEventMask, "Set Event Mask")
        add(.reset, "Reset")
        add(.writeLocalName, "Write Local Name")
        add(.readLocalName, "Read Local Name")
        add(.writeLEHostSupport, "Write LE Host Support")
        add(.setEventMaskPage2, "Set Event Mask Page 2")
        add(.readLocalVersionInformation, "Read Local Version Information")
        add(.readLocalSupportedCommands, "Read Local Supported Commands")
        add(.readLocalSupportedFeatures, "Read Local Supported Features")
        add(.readBufferSize, "Read Buffer Size")
        add(.readBDADDR, "Read BD_ADDR")
        add(.readRSSI, "Read RSSI")
        add(.leSetEventMask, "LE Set Event Mask")
        add(.leReadBufferSize, "LE Read Buffer Size")
        add(.leReadLocalSupportedFeatures, "LE Read Local Supported Features")
        add(.leSetRandomAddress, "LE Set Random Address")
        add(.leSetAdvertisingParameters, "LE Set Advertising Parameters")
        add(.leReadAdvertisingPhysicalChannelTxPower, "LE Read Advertising Physical Channel Tx Power")
        add(.leSetAdvertisingData, "LE Set Advertising Data")
        add(.leSetScanResponseData, "LE Set Scan Response Data")
        add(.leSetAdvertisingEnable, "LE Set Advertising Enable")
        add(.leSetScanParameters, "LE Set Scan Parameters")
        add(.leSetScanEnable, "LE Set Scan Enable")
        add(.leCreateConnection, "LE Create Connection")
        add(.leCreateConnectionCancel, "LE Create Connection Cancel")
        add(.leReadFilterAcceptListSize, "LE Read Filter Accept List Size")
        add(.leClearFilterAcceptList, "LE Clear Filter Accept List")
        add(.leAddDeviceToFilterAcceptList, "LE Add Device To Filter Accept List")
        add(.leRemoveDeviceFromFilterAcceptList, "LE Remove Device From Filter Accept List")
        add(.leConnectionUpdate, "LE Connection Update")
        add(.leReadRemoteFeatures, "LE Read Remote Features")
        add(.leEncrypt, "LE Encrypt")
        add(.leRand, "LE Rand")
        add(.leEnableEncryption, "LE Enable Encryption")
        add(.leLongTermKeyRequestReply, "LE Long Term Key Request Reply")
        add(.leLongTermKeyRequestNegativeReply, "LE Long Term Key Request Negative Reply")
        add(.leReadSupportedStates, "LE Read Supported States")
        add(.leSetDataLength, "LE Set Data Length")
        add(.leReadSuggestedDefaultDataLength, "LE Read Suggested Default Data Length")
        add(.leWriteSuggestedDefaultDataLength, "LE Write Suggested Default Data Length")
        add(.leReadMaximumDataLength, "LE Read Maximum Data Length")
        add(.leReadPHY, "LE Read PHY")
        add(.leSetDefaultPHY, "LE Set Default PHY")
        add(.leSetPHY, "LE Set PHY")
        add(.leSetAdvertisingSetRandomAddress, "LE Set Advertising Set Random Address")
        add(.leSetExtendedAdvertisingParameters, "LE Set Extended Advertising Parameters")
        add(.leSetExtendedAdvertisingData, "LE Set Extended Advertising Data")
        add(.leSetExtendedScanResponseData, "LE Set Extended Scan Response Data")
        add(.leSetExtendedAdvertisingEnable, "LE Set Extended Advertising Enable")
        add(.leReadMaximumAdvertisingDataLength, "LE Read Maximum Advertising Data Length")
        add(.leReadNumberOfSupportedAdvertisingSets, "LE Read Number of Supported Advertising Sets")
        add(.leRemoveAdvertisingSet, "LE Remove Advertising Set")
        add(.leClearAdvertisingSets, "LE Clear Advertising Sets")
        add(.leSetExtendedScanParameters, "LE Set Extended Scan Parameters")
        add(.leSetExtendedScanEnable, "LE Set Extended Scan Enable")
        add(.leExtendedCreateConnection, "LE Extended Create Connection")
        add(.leReadBufferSizeV2, "LE Read Buffer Size [v2]")
        add(.leExtendedCreateConnectionV2, "LE Extended Create Connection [v2]")
        return n
    }()
}

/// HCI event codes (Vol 4, Part E, §7.7). An open set.
public struct HCIEventCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let disconnectionComplete = HCIEventCode(rawValue: 0x05)
    public static let encryptionChange = HCIEventCode(rawValue: 0x08)
    public static let readRemoteVersionInformationComplete = HCIEventCode(rawValue: 0x0C)
    public static let commandComplete = HCIEventCode(rawValue: 0x0E)
    public static let commandStatus = HCIEventCode(rawValue: 0x0F)
    public static let hardwareError = HCIEventCode(rawValue: 0x10)
    public static let numberOfCompletedPackets = HCIEventCode(rawValue: 0x13)
    public static let dataBufferOverflow = HCIEventCode(rawValue: 0x1A)
    public static let encryptionKeyRefreshComplete = HCIEventCode(rawValue: 0x30)
    public static let leMeta = HCIEventCode(rawValue: 0x3E)
    public static let encryptionChangeV2 = HCIEventCode(rawValue: 0x59)
    public static let vendor = HCIEventCode(rawValue: 0xFF)

    public var name: String? {
        switch rawValue {
        case 0x05: return "Disconnection Complete"
        case 0x08: return "Encryption Change"
        case 0x0C: return "Read Remote Version Information Complete"
        case 0x0E: return "Command Complete"
        case 0x0F: return "Command Status"
        case 0x10: return "Hardware Error"
        case 0x13: return "Number Of Completed Packets"
        case 0x1A: return "Data Buffer Overflow"
        case 0x30: return "Encryption Key Refresh Complete"
        case 0x3E: return "LE Meta"
        case 0x59: return "Encryption Change [v2]"
        case 0xFF: return "Vendor"
        default: return nil
        }
    }

    public var description: String { name ?? "unknown 0x\(hex2(rawValue))" }
}

/// LE Meta event subevent codes (Vol 4, Part E, §7.7.65). An open set.
public struct LESubeventCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let connectionComplete = LESubeventCode(rawValue: 0x01)
    public static let advertisingReport = LESubeventCode(rawValue: 0x02)
    public static let connectionUpdateComplete = LESubeventCode(rawValue: 0x03)
    public static let readRemoteFeaturesComplete = LESubeventCode(rawValue: 0x04)
    public static let longTermKeyRequest = LESubeventCode(rawValue: 0x05)
    public static let dataLengthChange = LESubeventCode(rawValue: 0x07)
    public static let enhancedConnectionComplete = LESubeventCode(rawValue: 0x0A)
    public static let directedAdvertisingReport = LESubeventCode(rawValue: 0x0B)
    public static let phyUpdateComplete = LESubeventCode(rawValue: 0x0C)
    public static let extendedAdvertisingReport = LESubeventCode(rawValue: 0x0D)
    public static let scanTimeout = LESubeventCode(rawValue: 0x11)
    public static let advertisingSetTerminated = LESubeventCode(rawValue: 0x12)
    public static let channelSelectionAlgorithm = LESubeventCode(rawValue: 0x14)
    public static let enhancedConnectionCompleteV2 = LESubeventCode(rawValue: 0x29)

    public var name: String? {
        switch rawValue {
        case 0x01: return "LE Connection Complete"
        case 0x02: return "LE Advertising Report"
        case 0x03: return "LE Connection Update Complete"
        case 0x04: return "LE Read Remote Features Complete"
        case 0x05: return "LE Long Term Key Request"
        case 0x06: return "LE Remote Connection Parameter Request"
        case 0x07: return "LE Data Length Change"
        case 0x08: return "LE Read Local P-256 Public Key Complete"
        case 0x09: return "LE Generate DHKey Complete"
        case 0x0A: return "LE Enhanced Connection Complete"
        case 0x0B: return "LE Directed Advertising Report"
        case 0x0C: return "LE PHY Update Complete"
        case 0x0D: return "LE Extended Advertising Report"
        case 0x0E: return "LE Periodic Advertising Sync Established"
        case 0x0F: return "LE Periodic Advertising Report"
        case 0x10: return "LE Periodic Advertising Sync Lost"
        case 0x11: return "LE Scan Timeout"
        case 0x12: return "LE Advertising Set Terminated"
        case 0x13: return "LE Scan Request Received"
        case 0x14: return "LE Channel Selection Algorithm"
        case 0x29: return "LE Enhanced Connection Complete [v2]"
        default: return nil
        }
    }

    public var description: String { name ?? "unknown 0x\(hex2(rawValue))" }
}

@inlinable func hex2(_ v: UInt8) -> String {
    let s = String(v, radix: 16)
    return s.count == 1 ? "0" + s : s
}

/// Four lowercase hex digits (handles, opcodes, CIDs in messages).
@inlinable public func hex4(_ v: UInt16) -> String {
    let s = String(v, radix: 16)
    return String(repeating: "0", count: 4 - s.count) + s
}
