// What an HCI command's or event's number means, shown after it in the text view the
// way btmon shows it: intervals and timeouts in milliseconds from their units, powers
// in dBm, PHYs, filter policies and other enumerations by name, event masks and
// feature masks by bit, versions and company identifiers by name. JSON keeps the raw
// numbers (docs/trace-json.md): a program computes what it needs from them.
//
// A parameter is known by its codec property name (the names `FieldListing` hands over,
// Sources/HCI/FieldListing+*.swift). A name means the same in every command and event
// that has it, with one exception: `mask`, the return value shared by LE Read Local
// Supported Features and LE Read Supported States (§7.8.27), which is told apart by the
// command's opcode. Units and values: Core Specification v5.4, Vol 4, Part E, §7 (each command's
// and event's parameter table); LMP features Vol 2, Part C, §3.3; LE features Vol 6,
// Part B, §4.6.

import HCI

/// How a parameter's value is shown after it.
enum ParameterMeaning: Sendable {
    /// A time in units of `micros` µs, shown in ms; `zero` names the value 0 when it is special.
    case time(micros: Int, zero: StaticString? = nil)
    /// A time already in µs.
    case microseconds
    /// A power in dBm; `unavailable` names 127 (0x7F) when it means "not available".
    case power(unavailable: StaticString?)
    /// An enumeration: `names[value]`, nothing for a value outside the table.
    case names([StaticString?])
    /// A bit field: each set bit by name (`nil`: reserved, shown as "bit N"). The value
    /// itself is written in hex.
    case bits([StaticString?])
    /// Set Event Mask (page 1) / Set Event Mask Page 2: bit n enables event code n + 1 /
    /// 0x40 + n (§7.3.1, §7.3.69).
    case eventMask(page: Int)
    /// LE Set Event Mask: bit n enables LE subevent n + 1 (§7.8.1).
    case leEventMask
    case lmpFeatures
    case leFeatures
    /// LE Supported States: the mask in hex; its states are listed on lines of their own.
    case leStates
    case coreVersion
    case company

    /// The meaning of parameter `name`; `opcode` is the command (or the command a
    /// Command Complete answers), nil in other events.
    static func of(_ name: StaticString, opcode: UInt16?) -> ParameterMeaning? {
        guard let m = table[Name(name)] else { return nil }
        if Name(name) == Name("mask") {
            switch opcode {
            case HCIOpcode.leReadLocalSupportedFeatures.rawValue: return m
            case HCIOpcode.leReadSupportedStates.rawValue: return .leStates
            default: return nil
            }
        }
        return m
    }

    /// A parameter name as a dictionary key, compared by its bytes (no String made).
    struct Name: Hashable {
        let name: StaticString
        init(_ name: StaticString) { self.name = name }
        static func == (a: Name, b: Name) -> Bool {
            a.name.withUTF8Buffer { x in b.name.withUTF8Buffer { y in x.elementsEqual(y) } }
        }
        func hash(into h: inout Hasher) { name.withUTF8Buffer { h.combine(bytes: UnsafeRawBufferPointer($0)) } }
    }

    /// A power whose 127 means the controller has none to report (RSSI, a report's TX power).
    static let reportedPower: ParameterMeaning = .power(unavailable: "not available")
    static let phy: ParameterMeaning = .names([nil, "LE 1M", "LE 2M", "LE Coded"])
    static let phyBits: ParameterMeaning = .bits(["LE 1M", "LE 2M", "LE Coded"])
    static let clockAccuracy: ParameterMeaning = .names(["500 ppm", "250 ppm", "150 ppm", "100 ppm", "75 ppm", "50 ppm", "30 ppm", "20 ppm"])
    static let channels: ParameterMeaning = .bits(["37", "38", "39"])
    static let enabled: ParameterMeaning = .names(["disabled", "enabled"])
    static let dataOperation: ParameterMeaning = .names(["intermediate fragment", "first fragment", "last fragment", "complete data", "unchanged data"])
    static let slots: ParameterMeaning = .time(micros: 625)
    static let connectionEvents: ParameterMeaning = .time(micros: 1250)
    static let tens: ParameterMeaning = .time(micros: 10_000)

    static let table: [Name: ParameterMeaning] = [
        // Scanning and advertising intervals, 0.625 ms.
        Name("scanInterval"): slots, Name("scanWindow"): slots,
        Name("advertisingIntervalMin"): slots, Name("advertisingIntervalMax"): slots,
        Name("primaryAdvertisingIntervalMin"): slots, Name("primaryAdvertisingIntervalMax"): slots,
        Name("minCELength"): slots, Name("maxCELength"): slots,
        // Connection and periodic advertising intervals, 1.25 ms.
        Name("connectionInterval"): connectionEvents, Name("connectionIntervalMin"): connectionEvents,
        Name("connectionIntervalMax"): connectionEvents, Name("periodicAdvertisingInterval"): connectionEvents,
        Name("periodicAdvertisingIntervalMin"): connectionEvents, Name("periodicAdvertisingIntervalMax"): connectionEvents,
        // Timeouts and durations, 10 ms.
        Name("supervisionTimeout"): tens, Name("syncTimeout"): tens,
        Name("duration"): .time(micros: 10_000, zero: "no limit"),
        Name("period"): .time(micros: 1_280_000, zero: "continuous"),
        // Times in µs (LE Data Length).
        Name("maxTxTime"): .microseconds, Name("maxRxTime"): .microseconds, Name("txTime"): .microseconds,
        Name("suggestedMaxTxTime"): .microseconds, Name("supportedMaxTxTime"): .microseconds,
        Name("supportedMaxRxTime"): .microseconds,
        // Powers.
        Name("rssi"): reportedPower, Name("txPower"): reportedPower,
        Name("advertisingTxPower"): .power(unavailable: "no preference"),
        // PHYs.
        Name("txPHY"): phy, Name("rxPHY"): phy, Name("primaryPHY"): phy, Name("advertiserPHY"): phy,
        Name("primaryAdvertisingPHY"): phy, Name("secondaryAdvertisingPHY"): phy,
        Name("secondaryPHY"): .names(["no packets on the secondary channel", "LE 1M", "LE 2M", "LE Coded"]),
        Name("txPHYs"): phyBits, Name("rxPHYs"): phyBits, Name("scanningPHYs"): phyBits, Name("initiatingPHYs"): phyBits,
        Name("allPHYs"): .bits(["no transmitter preference", "no receiver preference"]),
        Name("phyOptions"): .names(["no preferred coding", "S=2 coding", "S=8 coding"]),
        // Advertising.
        Name("advertisingType"): .names(["connectable undirected (ADV_IND)", "connectable directed, high duty cycle (ADV_DIRECT_IND)",
                                          "scannable undirected (ADV_SCAN_IND)", "non-connectable undirected (ADV_NONCONN_IND)",
                                          "connectable directed, low duty cycle (ADV_DIRECT_IND)"]),
        Name("advertisingEventProperties"): .bits(["connectable", "scannable", "directed", "high duty cycle directed connectable",
                                                   "legacy PDUs", "anonymous", "include TX power"]),
        Name("periodicAdvertisingProperties"): .bits([nil, nil, nil, nil, nil, nil, "include TX power"]),
        Name("advertisingChannelMap"): channels, Name("primaryAdvertisingChannelMap"): channels,
        Name("advertisingFilterPolicy"): .names(["scan and connect requests from anyone",
                                                 "scan requests from the Filter Accept List only, connect requests from anyone",
                                                 "scan requests from anyone, connect requests from the Filter Accept List only",
                                                 "scan and connect requests from the Filter Accept List only"]),
        Name("operation"): dataOperation,
        Name("fragmentPreference"): .names(["the controller may fragment", "the controller should not fragment"]),
        Name("advertisingEnable"): enabled, Name("scanRequestNotificationEnable"): enabled,
        Name("dataStatus"): .names(["complete", "incomplete, more to come", "incomplete, truncated"]),
        Name("cteType"): .names(["AoA", "AoD with 1 µs slots", "AoD with 2 µs slots"]),
        // Scanning and connecting.
        Name("scanType"): .names(["passive", "active"]),
        Name("scanEnable"): enabled,
        Name("filterDuplicates"): .names(["disabled", "enabled", "enabled, reset for each scan period"]),
        Name("scanningFilterPolicy"): .names(["accept all", "Filter Accept List only",
                                              "accept all, and directed advertising to an unresolved RPA",
                                              "Filter Accept List only, and directed advertising to an unresolved RPA"]),
        Name("initiatorFilterPolicy"): .names(["the peer address", "the Filter Accept List"]),
        Name("options"): .bits(["use the Periodic Advertiser List", "reports initially disabled", "duplicate filtering initially enabled"]),
        Name("centralClockAccuracy"): clockAccuracy, Name("advertiserClockAccuracy"): clockAccuracy,
        Name("channelSelectionAlgorithm"): .names(["#1", "#2"]),
        Name("privacyMode"): .names(["network privacy", "device privacy"]),
        Name("encryptionEnabled"): .names(["off", "on (E0 on BR/EDR, AES-CCM on LE)", "on (AES-CCM on BR/EDR)"]),
        Name("linkType"): .names(["synchronous", "ACL"]),
        // Masks, features, versions.
        Name("eventMask"): .eventMask(page: 1), Name("eventMaskPage2"): .eventMask(page: 2),
        Name("leEventMask"): .leEventMask,
        Name("lmpFeatures"): .lmpFeatures,
        Name("mask"): .leFeatures,  // LE Read Local Supported Features; LE Read Supported States (see `of`)
        Name("rawValue"): .leFeatures,  // LEFeatures, the only codec with this property
        Name("hciVersion"): .coreVersion, Name("lmpVersion"): .coreVersion, Name("version"): .coreVersion,
        Name("companyIdentifier"): .company,
    ]

    /// LMP feature bits, page 0 (Vol 2, Part C, §3.3).
    static let lmpFeatureNames: [StaticString?] = [
        "3 slot packets", "5 slot packets", "Encryption", "Slot offset", "Timing accuracy", "Role switch", "Hold mode",
        "Sniff mode", nil, "Power control requests", "Channel quality driven data rate (CQDDR)", "SCO link",
        "HV2 packets", "HV3 packets", "u-law log synchronous data", "A-law log synchronous data", "CVSD synchronous data",
        "Paging parameter negotiation", "Power control", "Transparent synchronous data",
        "Flow control lag (least significant bit)", "Flow control lag (middle bit)", "Flow control lag (most significant bit)",
        "Broadcast Encryption", nil, "Enhanced Data Rate ACL 2 Mb/s mode", "Enhanced Data Rate ACL 3 Mb/s mode",
        "Enhanced inquiry scan", "Interlaced inquiry scan", "Interlaced page scan", "RSSI with inquiry results",
        "Extended SCO link (EV3 packets)", "EV4 packets", "EV5 packets", nil, "AFH capable peripheral",
        "AFH classification peripheral", "BR/EDR Not Supported", "LE Supported (Controller)",
        "3-slot Enhanced Data Rate ACL packets", "5-slot Enhanced Data Rate ACL packets", "Sniff subrating",
        "Pause encryption", "AFH capable central", "AFH classification central", "Enhanced Data Rate eSCO 2 Mb/s mode",
        "Enhanced Data Rate eSCO 3 Mb/s mode", "3-slot Enhanced Data Rate eSCO packets", "Extended Inquiry Response",
        "Simultaneous LE and BR/EDR to Same Device Capable (Controller)", nil, "Secure Simple Pairing (Controller Support)",
        "Encapsulated PDU", "Erroneous Data Reporting", "Non-flushable Packet Boundary Flag", nil,
        "HCI_Link_Supervision_Timeout_Changed event", "Variable Inquiry TX Power Level", "Enhanced Power Control",
        nil, nil, nil, nil, "Extended features",
    ]

    /// Writes `value` (as read from the parameter) and its meaning in parentheses.
    func write(_ value: Int64, into o: inout OutputBytes) {
        let bits = UInt64(bitPattern: value)
        switch self {
        case .bits, .eventMask, .leEventMask, .lmpFeatures, .leFeatures, .leStates:
            o.put("0x")
            o.hex(bits, width: value < 0 || bits > 0xFFFF_FFFF ? 16 : bits > 0xFF ? 8 : 2)
        default:
            o.decimal(Int(truncatingIfNeeded: value))
        }
        var names = NameList()
        switch self {
        case let .time(micros, zero):
            o.put(" (")
            if value == 0, let zero {
                o.put(zero)
            } else {
                let (total, overflow) = value.multipliedReportingOverflow(by: Int64(micros))
                if overflow { o.put("out of range") } else { Self.milliseconds(total, into: &o) }
            }
            o.put(")")
        case .microseconds:
            o.put(" µs")
        case let .power(unavailable):
            if value == 127, let unavailable {
                o.put(" ("); o.put(unavailable); o.put(")")
            } else {
                o.put(" dBm")
            }
        case let .names(table):
            guard value >= 0, value < table.count, let name = table[Int(value)] else { return }
            o.put(" ("); o.put(name); o.put(")")
        case let .bits(table):
            names.add(bits, table: table, into: &o)
        case let .eventMask(page):
            names.add(bits, into: &o) { bit in
                if page == 1, bit == 13 || bit == 14 || bit == 18 { return nil }  // Command Complete/Status, NOCP: always on
                return HCIEventCode(rawValue: UInt8(truncatingIfNeeded: (page == 1 ? 1 : 0x40) + bit)).name
            }
        case .leEventMask:
            names.add(bits, into: &o) { LESubeventCode(rawValue: UInt8(truncatingIfNeeded: $0 + 1)).name }
        case .lmpFeatures:
            names.add(bits, table: Self.lmpFeatureNames, into: &o)
        case .leFeatures:
            names.add(bits, into: &o) { LEFeatures(rawValue: 1 << UInt64($0)).names.first }
        case .leStates:
            break
        case .coreVersion:
            guard value >= 0, value <= 0xFF else { return }
            o.put(" (Bluetooth "); o.put(CoreVersion.name(UInt8(value))); o.put(")")
        case .company:
            guard value >= 0, value <= 0xFFFF else { return }
            o.put(" ("); o.put(CompanyIdentifier.name(UInt16(value))); o.put(")")
        }
        names.close(into: &o)
    }

    /// An LE Extended Advertising Report's Event_Type (§7.7.65.13): its bits, then the
    /// data status in bits 5–6.
    static func extendedReportType(_ type: UInt16, into o: inout OutputBytes) {
        var names = NameList()
        names.add(UInt64(type & 0x1F), table: ["connectable", "scannable", "directed", "scan response", "legacy"], into: &o)
        names.add(1, into: &o) { _ in
            switch (type >> 5) & 3 {
            case 0: "complete"
            case 1: "incomplete, more to come"
            case 2: "incomplete, truncated"
            default: "reserved data status"
            }
        }
        names.close(into: &o)
    }

    /// `micros` µs as milliseconds with three decimals ("60.000 ms").
    static func milliseconds(_ micros: Int64, into o: inout OutputBytes) {
        let ms = micros / 1000, rest = Int(micros % 1000)
        o.decimal(Int(ms))
        o.put(UInt8(ascii: "."))
        if rest < 100 { o.put(UInt8(ascii: "0")) }
        if rest < 10 { o.put(UInt8(ascii: "0")) }
        o.decimal(rest)
        o.put(" ms")
    }

    /// " (a, b, bit 9)" for the set bits of a mask; nothing when none is set.
    struct NameList {
        private var open = false

        mutating func add(_ bits: UInt64, table: [StaticString?], into o: inout OutputBytes) {
            for bit in 0..<64 where bits & (1 << UInt64(bit)) != 0 {
                next(&o)
                if bit < table.count, let name = table[bit] { o.put(name) } else { o.put("bit "); o.decimal(bit) }
            }
        }

        mutating func add(_ bits: UInt64, into o: inout OutputBytes, name: (Int) -> String?) {
            for bit in 0..<64 where bits & (1 << UInt64(bit)) != 0 {
                next(&o)
                if let n = name(bit) { o.put(n) } else { o.put("bit "); o.decimal(bit) }
            }
        }

        private mutating func next(_ o: inout OutputBytes) {
            o.put(open ? ", " : " (")
            open = true
        }

        func close(into o: inout OutputBytes) { if open { o.put(UInt8(ascii: ")")) } }
    }
}
