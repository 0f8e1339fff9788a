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

    /// The opcode a command line names: `0x2018` (hex), `0x08:0x0018` (OGF:OCF in hex,
    /// as hcitool takes them), or the specification's name as `name` spells it, case,
    /// spacing and an `HCI_` prefix aside (`"LE Rand"`, `le-rand`, `HCI_LE_Rand`).
    public init?(parsing text: String) {
        // Letters and digits only, lower-cased: "LE Rand", "le-rand" and "LERand" agree.
        func key(_ s: some StringProtocol) -> String {
            String(String.UnicodeScalarView(s.lowercased().unicodeScalars.filter { ("a"..."z").contains($0) || ("0"..."9").contains($0) }))
        }
        func hex<T: FixedWidthInteger>(_ s: Substring, max: T) -> T? {
            let digits = s.hasPrefix("0x") ? s.dropFirst(2) : s
            guard let v = T(hexDigits: digits), v <= max else { return nil }
            return v
        }
        var t = text.lowercased().drop { $0 == " " }
        while t.last == " " { t = t.dropLast() }
        if t.contains(":") {
            let parts = t.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count == 2, let ogf = hex(parts[0], max: UInt8(0x3F)), let ocf = hex(parts[1], max: UInt16(0x3FF)) else { return nil }
            self.init(ogf: ogf, ocf: ocf)
            return
        }
        if t.hasPrefix("0x") {
            guard let v = UInt16(hexDigits: t.dropFirst(2)) else { return nil }
            self.init(rawValue: v)
            return
        }
        let wanted = key(t.hasPrefix("hci_") ? t.dropFirst(4) : t)
        guard !wanted.isEmpty, let (raw, _) = Self.names.first(where: { key($0.value) == wanted }) else { return nil }
        self.init(rawValue: raw)
    }

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
    public static let leAddDeviceToResolvingList = HCIOpcode(ogf: 0x08, ocf: 0x0027)
    public static let leRemoveDeviceFromResolvingList = HCIOpcode(ogf: 0x08, ocf: 0x0028)
    public static let leClearResolvingList = HCIOpcode(ogf: 0x08, ocf: 0x0029)
    public static let leReadResolvingListSize = HCIOpcode(ogf: 0x08, ocf: 0x002A)
    public static let leSetAddressResolutionEnable = HCIOpcode(ogf: 0x08, ocf: 0x002D)
    public static let leSetPrivacyMode = HCIOpcode(ogf: 0x08, ocf: 0x004E)
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
    public static let leSetPeriodicAdvertisingParameters = HCIOpcode(ogf: 0x08, ocf: 0x003E)
    public static let leSetPeriodicAdvertisingData = HCIOpcode(ogf: 0x08, ocf: 0x003F)
    public static let leSetPeriodicAdvertisingEnable = HCIOpcode(ogf: 0x08, ocf: 0x0040)
    public static let leSetExtendedScanParameters = HCIOpcode(ogf: 0x08, ocf: 0x0041)
    public static let leSetExtendedScanEnable = HCIOpcode(ogf: 0x08, ocf: 0x0042)
    public static let leExtendedCreateConnection = HCIOpcode(ogf: 0x08, ocf: 0x0043)
    public static let lePeriodicAdvertisingCreateSync = HCIOpcode(ogf: 0x08, ocf: 0x0044)
    public static let lePeriodicAdvertisingCreateSyncCancel = HCIOpcode(ogf: 0x08, ocf: 0x0045)
    public static let lePeriodicAdvertisingTerminateSync = HCIOpcode(ogf: 0x08, ocf: 0x0046)
    public static let leAddDeviceToPeriodicAdvertiserList = HCIOpcode(ogf: 0x08, ocf: 0x0047)
    public static let leRemoveDeviceFromPeriodicAdvertiserList = HCIOpcode(ogf: 0x08, ocf: 0x0048)
    public static let leClearPeriodicAdvertiserList = HCIOpcode(ogf: 0x08, ocf: 0x0049)
    public static let leReadPeriodicAdvertiserListSize = HCIOpcode(ogf: 0x08, ocf: 0x004A)
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
        add(.leSetPeriodicAdvertisingParameters, "LE Set Periodic Advertising Parameters")
        add(.leSetPeriodicAdvertisingData, "LE Set Periodic Advertising Data")
        add(.leSetPeriodicAdvertisingEnable, "LE Set Periodic Advertising Enable")
        add(.leSetExtendedScanParameters, "LE Set Extended Scan Parameters")
        add(.leSetExtendedScanEnable, "LE Set Extended Scan Enable")
        add(.leExtendedCreateConnection, "LE Extended Create Connection")
        add(.lePeriodicAdvertisingCreateSync, "LE Periodic Advertising Create Sync")
        add(.lePeriodicAdvertisingCreateSyncCancel, "LE Periodic Advertising Create Sync Cancel")
        add(.lePeriodicAdvertisingTerminateSync, "LE Periodic Advertising Terminate Sync")
        add(.leAddDeviceToPeriodicAdvertiserList, "LE Add Device To Periodic Advertiser List")
        add(.leRemoveDeviceFromPeriodicAdvertiserList, "LE Remove Device From Periodic Advertiser List")
        add(.leClearPeriodicAdvertiserList, "LE Clear Periodic Advertiser List")
        add(.leReadPeriodicAdvertiserListSize, "LE Read Periodic Advertiser List Size")
        add(.leReadBufferSizeV2, "LE Read Buffer Size [v2]")
        add(.leExtendedCreateConnectionV2, "LE Extended Create Connection [v2]")
        // The other commands of Vol 4, Part E, §7.1-7.8 by name only (no typed
        // parameters): what Bumble, BlueZ and phones send shows by name in traces.
        let others: [(UInt8, UInt16, String)] = [
            (0x01, 0x0001, "Inquiry"),
            (0x01, 0x0002, "Inquiry Cancel"),
            (0x01, 0x0003, "Periodic Inquiry Mode"),
            (0x01, 0x0004, "Exit Periodic Inquiry Mode"),
            (0x01, 0x0005, "Create Connection"),
            (0x01, 0x0008, "Create Connection Cancel"),
            (0x01, 0x0009, "Accept Connection Request"),
            (0x01, 0x000A, "Reject Connection Request"),
            (0x01, 0x000B, "Link Key Request Reply"),
            (0x01, 0x000C, "Link Key Request Negative Reply"),
            (0x01, 0x000D, "PIN Code Request Reply"),
            (0x01, 0x000E, "PIN Code Request Negative Reply"),
            (0x01, 0x000F, "Change Connection Packet Type"),
            (0x01, 0x0011, "Authentication Requested"),
            (0x01, 0x0013, "Set Connection Encryption"),
            (0x01, 0x0015, "Change Connection Link Key"),
            (0x01, 0x0019, "Remote Name Request"),
            (0x01, 0x001A, "Remote Name Request Cancel"),
            (0x01, 0x001B, "Read Remote Supported Features"),
            (0x01, 0x001C, "Read Remote Extended Features"),
            (0x01, 0x001F, "Read Clock Offset"),
            (0x01, 0x0028, "Setup Synchronous Connection"),
            (0x01, 0x0029, "Accept Synchronous Connection Request"),
            (0x01, 0x002A, "Reject Synchronous Connection Request"),
            (0x01, 0x002B, "IO Capability Request Reply"),
            (0x01, 0x002C, "User Confirmation Request Reply"),
            (0x01, 0x002D, "User Confirmation Request Negative Reply"),
            (0x01, 0x002E, "User Passkey Request Reply"),
            (0x01, 0x002F, "User Passkey Request Negative Reply"),
            (0x01, 0x0030, "Remote OOB Data Request Reply"),
            (0x01, 0x0033, "Remote OOB Data Request Negative Reply"),
            (0x01, 0x0034, "IO Capability Request Negative Reply"),
            (0x01, 0x003D, "Enhanced Setup Synchronous Connection"),
            (0x01, 0x003E, "Enhanced Accept Synchronous Connection Request"),
            (0x02, 0x0001, "Hold Mode"),
            (0x02, 0x0003, "Sniff Mode"),
            (0x02, 0x0004, "Exit Sniff Mode"),
            (0x02, 0x0007, "QoS Setup"),
            (0x02, 0x0009, "Role Discovery"),
            (0x02, 0x000B, "Switch Role"),
            (0x02, 0x000C, "Read Link Policy Settings"),
            (0x02, 0x000D, "Write Link Policy Settings"),
            (0x02, 0x000E, "Read Default Link Policy Settings"),
            (0x02, 0x000F, "Write Default Link Policy Settings"),
            (0x02, 0x0010, "Flow Specification"),
            (0x02, 0x0011, "Sniff Subrating"),
            (0x03, 0x0005, "Set Event Filter"),
            (0x03, 0x0008, "Flush"),
            (0x03, 0x0009, "Read PIN Type"),
            (0x03, 0x000A, "Write PIN Type"),
            (0x03, 0x000D, "Read Stored Link Key"),
            (0x03, 0x0011, "Write Stored Link Key"),
            (0x03, 0x0012, "Delete Stored Link Key"),
            (0x03, 0x0015, "Read Connection Accept Timeout"),
            (0x03, 0x0016, "Write Connection Accept Timeout"),
            (0x03, 0x0017, "Read Page Timeout"),
            (0x03, 0x0018, "Write Page Timeout"),
            (0x03, 0x0019, "Read Scan Enable"),
            (0x03, 0x001A, "Write Scan Enable"),
            (0x03, 0x001B, "Read Page Scan Activity"),
            (0x03, 0x001C, "Write Page Scan Activity"),
            (0x03, 0x001D, "Read Inquiry Scan Activity"),
            (0x03, 0x001E, "Write Inquiry Scan Activity"),
            (0x03, 0x001F, "Read Authentication Enable"),
            (0x03, 0x0020, "Write Authentication Enable"),
            (0x03, 0x0023, "Read Class of Device"),
            (0x03, 0x0024, "Write Class of Device"),
            (0x03, 0x0025, "Read Voice Setting"),
            (0x03, 0x0026, "Write Voice Setting"),
            (0x03, 0x0027, "Read Automatic Flush Timeout"),
            (0x03, 0x0028, "Write Automatic Flush Timeout"),
            (0x03, 0x002D, "Read Transmit Power Level"),
            (0x03, 0x0031, "Set Controller To Host Flow Control"),
            (0x03, 0x0033, "Host Buffer Size"),
            (0x03, 0x0035, "Host Number Of Completed Packets"),
            (0x03, 0x0036, "Read Link Supervision Timeout"),
            (0x03, 0x0037, "Write Link Supervision Timeout"),
            (0x03, 0x0038, "Read Number Of Supported IAC"),
            (0x03, 0x0039, "Read Current IAC LAP"),
            (0x03, 0x003A, "Write Current IAC LAP"),
            (0x03, 0x003F, "Set AFH Host Channel Classification"),
            (0x03, 0x0042, "Read Inquiry Scan Type"),
            (0x03, 0x0043, "Write Inquiry Scan Type"),
            (0x03, 0x0044, "Read Inquiry Mode"),
            (0x03, 0x0045, "Write Inquiry Mode"),
            (0x03, 0x0046, "Read Page Scan Type"),
            (0x03, 0x0047, "Write Page Scan Type"),
            (0x03, 0x0051, "Read Extended Inquiry Response"),
            (0x03, 0x0052, "Write Extended Inquiry Response"),
            (0x03, 0x0055, "Read Simple Pairing Mode"),
            (0x03, 0x0056, "Write Simple Pairing Mode"),
            (0x03, 0x0057, "Read Local OOB Data"),
            (0x03, 0x0058, "Read Inquiry Response Transmit Power Level"),
            (0x03, 0x0059, "Write Inquiry Transmit Power Level"),
            (0x03, 0x005A, "Read Default Erroneous Data Reporting"),
            (0x03, 0x005B, "Write Default Erroneous Data Reporting"),
            (0x03, 0x005F, "Enhanced Flush"),
            (0x03, 0x006C, "Read LE Host Support"),
            (0x03, 0x0079, "Read Secure Connections Host Support"),
            (0x03, 0x007A, "Write Secure Connections Host Support"),
            (0x03, 0x007B, "Read Authenticated Payload Timeout"),
            (0x03, 0x007C, "Write Authenticated Payload Timeout"),
            (0x03, 0x007D, "Read Local OOB Extended Data"),
            (0x04, 0x0004, "Read Local Extended Features"),
            (0x04, 0x000A, "Read Data Block Size"),
            (0x04, 0x000B, "Read Local Supported Codecs"),
            (0x04, 0x000C, "Read Local Simple Pairing Options"),
            (0x04, 0x000D, "Read Local Supported Codecs [v2]"),
            (0x04, 0x000E, "Read Local Supported Codec Capabilities"),
            (0x04, 0x000F, "Read Local Supported Controller Delay"),
            (0x05, 0x0001, "Read Failed Contact Counter"),
            (0x05, 0x0002, "Reset Failed Contact Counter"),
            (0x05, 0x0003, "Read Link Quality"),
            (0x05, 0x0006, "Read AFH Channel Map"),
            (0x05, 0x0007, "Read Clock"),
            (0x05, 0x0008, "Read Encryption Key Size"),
            (0x06, 0x0001, "Read Loopback Mode"),
            (0x06, 0x0002, "Write Loopback Mode"),
            (0x06, 0x0003, "Enable Device Under Test Mode"),
            (0x06, 0x0004, "Write Simple Pairing Debug Mode"),
            (0x08, 0x0014, "LE Set Host Channel Classification"),
            (0x08, 0x0015, "LE Read Channel Map"),
            (0x08, 0x001D, "LE Receiver Test"),
            (0x08, 0x001E, "LE Transmitter Test"),
            (0x08, 0x001F, "LE Test End"),
            (0x08, 0x0020, "LE Remote Connection Parameter Request Reply"),
            (0x08, 0x0021, "LE Remote Connection Parameter Request Negative Reply"),
            (0x08, 0x0025, "LE Read Local P-256 Public Key"),
            (0x08, 0x0026, "LE Generate DHKey"),
            (0x08, 0x0027, "LE Add Device To Resolving List"),
            (0x08, 0x0028, "LE Remove Device From Resolving List"),
            (0x08, 0x0029, "LE Clear Resolving List"),
            (0x08, 0x002A, "LE Read Resolving List Size"),
            (0x08, 0x002B, "LE Read Peer Resolvable Address"),
            (0x08, 0x002C, "LE Read Local Resolvable Address"),
            (0x08, 0x002D, "LE Set Address Resolution Enable"),
            (0x08, 0x002E, "LE Set Resolvable Private Address Timeout"),
            (0x08, 0x0033, "LE Receiver Test [v2]"),
            (0x08, 0x0034, "LE Transmitter Test [v2]"),
            (0x08, 0x003E, "LE Set Periodic Advertising Parameters"),
            (0x08, 0x003F, "LE Set Periodic Advertising Data"),
            (0x08, 0x0040, "LE Set Periodic Advertising Enable"),
            (0x08, 0x0044, "LE Periodic Advertising Create Sync"),
            (0x08, 0x0045, "LE Periodic Advertising Create Sync Cancel"),
            (0x08, 0x0046, "LE Periodic Advertising Terminate Sync"),
            (0x08, 0x004B, "LE Read Transmit Power"),
            (0x08, 0x004C, "LE Read RF Path Compensation"),
            (0x08, 0x004D, "LE Write RF Path Compensation"),
            (0x08, 0x004E, "LE Set Privacy Mode"),
            (0x08, 0x0059, "LE Set Periodic Advertising Receive Enable"),
            (0x08, 0x005A, "LE Periodic Advertising Sync Transfer"),
            (0x08, 0x005B, "LE Periodic Advertising Set Info Transfer"),
            (0x08, 0x005C, "LE Set Periodic Advertising Sync Transfer Parameters"),
            (0x08, 0x005D, "LE Set Default Periodic Advertising Sync Transfer Parameters"),
            (0x08, 0x005E, "LE Generate DHKey [v2]"),
            (0x08, 0x005F, "LE Modify Sleep Clock Accuracy"),
            (0x08, 0x0061, "LE Read ISO TX Sync"),
            (0x08, 0x0062, "LE Set CIG Parameters"),
            (0x08, 0x0063, "LE Set CIG Parameters Test"),
            (0x08, 0x0064, "LE Create CIS"),
            (0x08, 0x0065, "LE Remove CIG"),
            (0x08, 0x0066, "LE Accept CIS Request"),
            (0x08, 0x0067, "LE Reject CIS Request"),
            (0x08, 0x0068, "LE Create BIG"),
            (0x08, 0x0069, "LE Create BIG Test"),
            (0x08, 0x006A, "LE Terminate BIG"),
            (0x08, 0x006B, "LE BIG Create Sync"),
            (0x08, 0x006C, "LE BIG Terminate Sync"),
            (0x08, 0x006D, "LE Request Peer SCA"),
            (0x08, 0x006E, "LE Setup ISO Data Path"),
            (0x08, 0x006F, "LE Remove ISO Data Path"),
            (0x08, 0x0074, "LE Set Host Feature"),
            (0x08, 0x0075, "LE Read ISO Link Quality"),
            (0x08, 0x0076, "LE Enhanced Read Transmit Power Level"),
            (0x08, 0x0077, "LE Read Remote Transmit Power Level"),
            (0x08, 0x0078, "LE Set Path Loss Reporting Parameters"),
            (0x08, 0x0079, "LE Set Path Loss Reporting Enable"),
            (0x08, 0x007A, "LE Set Transmit Power Reporting Enable"),
            (0x08, 0x007C, "LE Set Data Related Address Changes"),
            (0x08, 0x007D, "LE Set Default Subrate"),
            (0x08, 0x007E, "LE Subrate Request"),
        ]
        for (ogf, ocf, name) in others {
            let raw = HCIOpcode(ogf: ogf, ocf: ocf).rawValue
            if n[raw] == nil { n[raw] = name }
        }
        // Every other command with a Supported_Commands bit, by its §6.27 name.
        for e in SupportedCommands.assigned where n[e.opcode] == nil { n[e.opcode] = e.name.description }
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

    /// The event's name in §7.7 (AMP events, withdrawn in v5.3, are left unnamed).
    public var name: String? {
        switch rawValue {
        case 0x01: return "Inquiry Complete"
        case 0x02: return "Inquiry Result"
        case 0x03: return "Connection Complete"
        case 0x04: return "Connection Request"
        case 0x05: return "Disconnection Complete"
        case 0x06: return "Authentication Complete"
        case 0x07: return "Remote Name Request Complete"
        case 0x08: return "Encryption Change"
        case 0x09: return "Change Connection Link Key Complete"
        case 0x0A: return "Link Key Type Changed"
        case 0x0B: return "Read Remote Supported Features Complete"
        case 0x0C: return "Read Remote Version Information Complete"
        case 0x0D: return "QoS Setup Complete"
        case 0x0E: return "Command Complete"
        case 0x0F: return "Command Status"
        case 0x10: return "Hardware Error"
        case 0x11: return "Flush Occurred"
        case 0x12: return "Role Change"
        case 0x13: return "Number Of Completed Packets"
        case 0x14: return "Mode Change"
        case 0x15: return "Return Link Keys"
        case 0x16: return "PIN Code Request"
        case 0x17: return "Link Key Request"
        case 0x18: return "Link Key Notification"
        case 0x19: return "Loopback Command"
        case 0x1A: return "Data Buffer Overflow"
        case 0x1B: return "Max Slots Change"
        case 0x1C: return "Read Clock Offset Complete"
        case 0x1D: return "Connection Packet Type Changed"
        case 0x1E: return "QoS Violation"
        case 0x1F: return "Page Scan Mode Change"
        case 0x20: return "Page Scan Repetition Mode Change"
        case 0x21: return "Flow Specification Complete"
        case 0x22: return "Inquiry Result with RSSI"
        case 0x23: return "Read Remote Extended Features Complete"
        case 0x2C: return "Synchronous Connection Complete"
        case 0x2D: return "Synchronous Connection Changed"
        case 0x2E: return "Sniff Subrating"
        case 0x2F: return "Extended Inquiry Result"
        case 0x30: return "Encryption Key Refresh Complete"
        case 0x31: return "IO Capability Request"
        case 0x32: return "IO Capability Response"
        case 0x33: return "User Confirmation Request"
        case 0x34: return "User Passkey Request"
        case 0x35: return "Remote OOB Data Request"
        case 0x36: return "Simple Pairing Complete"
        case 0x38: return "Link Supervision Timeout Changed"
        case 0x39: return "Enhanced Flush Complete"
        case 0x3B: return "User Passkey Notification"
        case 0x3C: return "Keypress Notification"
        case 0x3D: return "Remote Host Supported Features Notification"
        case 0x3E: return "LE Meta"
        case 0x48: return "Number Of Completed Data Blocks"
        case 0x4E: return "Triggered Clock Capture"
        case 0x4F: return "Synchronization Train Complete"
        case 0x50: return "Synchronization Train Received"
        case 0x51: return "Connectionless Peripheral Broadcast Receive"
        case 0x52: return "Connectionless Peripheral Broadcast Timeout"
        case 0x53: return "Truncated Page Complete"
        case 0x54: return "Peripheral Page Response Timeout"
        case 0x55: return "Connectionless Peripheral Broadcast Channel Map Change"
        case 0x56: return "Inquiry Response Notification"
        case 0x57: return "Authenticated Payload Timeout Expired"
        case 0x58: return "SAM Status Change"
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
    public static let periodicAdvertisingSyncEstablished = LESubeventCode(rawValue: 0x0E)
    public static let periodicAdvertisingReport = LESubeventCode(rawValue: 0x0F)
    public static let periodicAdvertisingSyncLost = LESubeventCode(rawValue: 0x10)
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
        case 0x15: return "LE Connectionless IQ Report"
        case 0x16: return "LE Connection IQ Report"
        case 0x17: return "LE CTE Request Failed"
        case 0x18: return "LE Periodic Advertising Sync Transfer Received"
        case 0x19: return "LE CIS Established"
        case 0x1A: return "LE CIS Request"
        case 0x1B: return "LE Create BIG Complete"
        case 0x1C: return "LE Terminate BIG Complete"
        case 0x1D: return "LE BIG Sync Established"
        case 0x1E: return "LE BIG Sync Lost"
        case 0x1F: return "LE Request Peer SCA Complete"
        case 0x20: return "LE Path Loss Threshold"
        case 0x21: return "LE Transmit Power Reporting"
        case 0x22: return "LE BIGInfo Advertising Report"
        case 0x23: return "LE Subrate Change"
        case 0x24: return "LE Periodic Advertising Sync Established [v2]"
        case 0x25: return "LE Periodic Advertising Report [v2]"
        case 0x26: return "LE Periodic Advertising Sync Transfer Received [v2]"
        case 0x27: return "LE Periodic Advertising Subevent Data Request"
        case 0x28: return "LE Periodic Advertising Response Report"
        case 0x29: return "LE Enhanced Connection Complete [v2]"
        case 0x2A: return "LE CIS Established [v2]"
        default: return nil
        }
    }

    public var description: String { name ?? "unknown 0x\(hex2(rawValue))" }
}

/// Two lowercase hex digits (a status, a code, a byte in messages).
@inlinable public func hex2(_ v: UInt8) -> String {
    let s = String(v, radix: 16)
    return s.count == 1 ? "0" + s : s
}

/// Four lowercase hex digits (handles, opcodes, CIDs in messages).
@inlinable public func hex4(_ v: UInt16) -> String {
    let s = String(v, radix: 16)
    return String(repeating: "0", count: 4 - s.count) + s
}
