import Foundation
import HCI
import Testing

@testable import Snoop

/// What `trace show` says an HCI command's or event's numbers mean, as btmon shows them:
/// on our own capture against Rootcanal (Fixtures/rootcanal-gatt-read.btsnoop) and on
/// parameters built byte by byte from the Core Specification's parameter tables (v5.4,
/// Vol 4, Part E, §7). JSON keeps the raw numbers.
@Suite(.timeLimit(.minutes(3)))
struct ParameterMeaningTests {
    /// The detail lines and JSON of one packet.
    static func decoded(_ packet: HCIPacket) -> (lines: [String], json: JSONValue) {
        var d = FrameDecoder()
        let direction: TraceRecord.Direction = if case .command = packet { .hostToController } else { .controllerToHost }
        let f = d.decode(TraceRecord(timestampMicros: 0, packet: packet, direction: direction), number: 1, firstTimestamp: 0)
        return (f.details, f.json)
    }

    static func command(_ opcode: UInt16, _ hex: String) -> (lines: [String], json: JSONValue) {
        decoded(.command(opcode: HCIOpcode(rawValue: opcode), parameters: [UInt8](hex: hex)!))
    }

    static func complete(_ opcode: UInt16, _ hex: String) -> [String] {
        let op = [UInt8(opcode & 0xFF), UInt8(opcode >> 8)]
        return decoded(.event(code: .commandComplete, parameters: [1] + op + [0] + [UInt8](hex: hex)!)).lines
    }

    @Test func rootcanalsInitializationReadsAsBtmonWouldShowIt() throws {
        let root = String(#filePath).components(separatedBy: "/Tests/").first ?? "."
        let trace = try TraceReader.read([UInt8](try Data(contentsOf: URL(fileURLWithPath: root + "/Fixtures/rootcanal-gatt-read.btsnoop"))))
        var d = FrameDecoder()
        let lines = trace.records.enumerated().flatMap { d.decode($1, number: $0 + 1, firstTimestamp: 0).details }
        func has(_ line: String) { #expect(lines.contains(line), "\(line) not in \(lines.prefix(60))") }
        has("hciVersion: 12 (Bluetooth 5.3)")
        has("companyIdentifier: 224 (Google)")
        // Set Event Mask 0x2000800002008890: bits 4, 7, 11, 15, 25, 47, 61 enable event
        // codes 0x05, 0x08, 0x0C, 0x10, 0x1A, 0x30, 0x3E (§7.3.1).
        has("eventMask: 0x2000800002008890 (Disconnection Complete, Encryption Change, Read Remote Version Information Complete, "
            + "Hardware Error, Data Buffer Overflow, Encryption Key Refresh Complete, LE Meta)")
        has("eventMaskPage2: 0x02000000 (Encryption Change [v2])")
        // LE Read Local Supported Features names its bits; LE Read Supported States, whose
        // return parameter has the same property name, lists its 42 states and
        // combinations (§7.8.27: all that are defined), one per line.
        #expect(lines.contains { $0.hasPrefix("mask: 0x300039df (LE Encryption, Connection Parameters Request Procedure,") }, "\(lines.prefix(40))")
        has("mask: 0x000003ffffffffff")
        let states = try #require(lines.firstIndex(of: "States: 42 supported"), "\(lines.prefix(80))")
        #expect(Array(lines[(states + 1)...].prefix(8)) == [
            "  Non-connectable Advertising (bit 0)", "  Scannable Advertising (bit 1)", "  Connectable Advertising (bit 2)",
            "  High Duty Cycle Directed Advertising (bit 3)", "  Passive Scanning (bit 4)", "  Active Scanning (bit 5)",
            "  Initiating / Connection (Central Role) (bit 6)", "  Connection (Peripheral Role) (bit 7)"], "\(lines[states...].prefix(9))")
        has("  Scannable Advertising + Passive Scanning (bit 9)")
        has("  Initiating + Connection (Central Role) (bit 28)")
        has("  Low Duty Cycle Directed Advertising + Connection (Peripheral Role) (bit 40)")
        has("  Initiating + Connection (Peripheral Role) (bit 41)")
        has("scanningPHYs: 0x01 (LE 1M)")
        has("phys: [{scanType=1 (active), scanInterval=96 (60.000 ms), scanWindow=48 (30.000 ms)}]")
        has("duration: 0 (no limit)")
        has("supportedMaxTxTime: 338 µs")
        has("connectionInterval: 40 (50.000 ms)")
        has("supervisionTimeout: 500 (5000.000 ms)")
        has("centralClockAccuracy: 0 (500 ppm)")
        has("channelSelectionAlgorithm: 0 (#1)")
        has("report 0: event_type=0x0013 (connectable, scannable, legacy, complete) DA:4C:10:DE:17:00 (public) rssi=-10 dBm tx_power=127 (not available)")
    }

    @Test func legacyAdvertisingParametersFromTheirTable() {
        // §7.8.5: Advertising_Interval_Min/Max 0x0800 (1.28 s), ADV_SCAN_IND, own address
        // random, peer public 00:00:00:00:00:00, channels 37 and 39, filter policy 2.
        let (lines, json) = Self.command(0x2006, "0008" + "0008" + "02" + "01" + "00" + "000000000000" + "05" + "02")
        #expect(lines == [
            "advertisingIntervalMin: 2048 (1280.000 ms)", "advertisingIntervalMax: 2048 (1280.000 ms)",
            "advertisingType: 2 (scannable undirected (ADV_SCAN_IND))", "ownAddressType: random", "peerAddressType: public",
            "peerAddress: 00:00:00:00:00:00", "advertisingChannelMap: 0x05 (37, 39)",
            "advertisingFilterPolicy: 2 (scan requests from anyone, connect requests from the Filter Accept List only)",
        ], "\(lines)")
        // JSON keeps the numbers.
        #expect(json["params"]?["advertisingIntervalMin"] == .int(2048) && json["params"]?["advertisingChannelMap"] == .int(5), "\(json)")
    }

    @Test func extendedAdvertisingParametersNameBitsAndLeaveUnknownValuesBare() {
        // §7.8.53 [v1]: handle 1, properties 0x0053 (connectable, scannable, legacy,
        // include TX power; the hex is as wide as the value), intervals 0x0000A0 (100 ms) and 0x0000F0 (150 ms), all three
        // channels, own public, peer public 00…, filter policy 7 (reserved: no name), TX
        // power -7 dBm, primary PHY LE Coded, max skip 0, secondary PHY LE 2M, SID 3,
        // scan request notifications enabled.
        let (lines, _) = Self.command(0x2036, "01" + "5300" + "a00000" + "f00000" + "07" + "00" + "00" + "000000000000" + "07" + "f9"
            + "03" + "00" + "02" + "03" + "01")
        #expect(lines == [
            "advertisingHandle: 1", "advertisingEventProperties: 0x53 (connectable, scannable, legacy PDUs, include TX power)",
            "primaryAdvertisingIntervalMin: 160 (100.000 ms)", "primaryAdvertisingIntervalMax: 240 (150.000 ms)",
            "primaryAdvertisingChannelMap: 0x07 (37, 38, 39)", "ownAddressType: public", "peerAddressType: public",
            "peerAddress: 00:00:00:00:00:00", "advertisingFilterPolicy: 7", "advertisingTxPower: -7 dBm",
            "primaryAdvertisingPHY: 3 (LE Coded)", "secondaryAdvertisingMaxSkip: 0", "secondaryAdvertisingPHY: 2 (LE 2M)",
            "advertisingSID: 3", "scanRequestNotificationEnable: 1 (enabled)",
        ], "\(lines)")
        // TX power 0x7F: the host has no preference.
        let none = Self.command(0x2036, "01" + "1300" + "a00000" + "a00000" + "07" + "00" + "00" + "000000000000" + "00" + "7f"
            + "01" + "00" + "01" + "00" + "00").lines
        #expect(none.contains("advertisingTxPower: 127 (no preference)"), "\(none)")
    }

    @Test func masksNameReservedAndUnknownBitsByNumber() {
        // Bits 13, 14 and 18 of page 1 are reserved (Command Complete, Command Status and
        // Number Of Completed Packets cannot be masked); bit 62 is beyond the table.
        let (lines, _) = Self.command(0x0C01, "0160040000000040")
        #expect(lines == ["eventMask: 0x4000000000046001 (Inquiry Complete, bit 13, bit 14, bit 18, bit 62)"], "\(lines)")
        // LE Set Event Mask: bit n is subevent n + 1 (§7.8.1).
        #expect(Self.command(0x2001, "0100000000800000").lines == ["leEventMask: 0x0000800000000001 (LE Connection Complete, bit 47)"])
        // Read Local Supported Features (§7.4.3): bit 8 is no longer assigned.
        #expect(Self.complete(0x1003, "0501000000000080") == ["lmpFeatures: 0x8000000000000105 (3 slot packets, Encryption, bit 8, Extended features)"])
    }

    @Test func connectionUpdateAndReadRemoteVersion() {
        // §7.8.18: handle 0x0040, interval 7.5 ms … 4 s, latency 4, timeout 32 s, CE 0 … 0xFFFF.
        let update = Self.command(0x2013, "4000" + "0600" + "800c" + "0400" + "800c" + "0000" + "ffff").lines
        #expect(update.contains("connection: {connectionIntervalMin=6 (7.500 ms), connectionIntervalMax=3200 (4000.000 ms), maxLatency=4, "
                                + "supervisionTimeout=3200 (32000.000 ms), minCELength=0 (0.000 ms), maxCELength=65535 (40959.375 ms)}"), "\(update)")
        // §7.7.12 Read Remote Version Information Complete: version 0x0D (5.4), company 0x000F.
        let version = Self.decoded(.event(code: .readRemoteVersionInformationComplete, parameters: [UInt8](hex: "0040000d0f003412")!)).lines
        #expect(version.contains("version: 13 (Bluetooth 5.4)") && version.contains("companyIdentifier: 15 (Broadcom Corporation)"), "\(version)")
    }

    /// LE Read Supported States (§7.8.27) built with bit 0, bit 41 and bit 50, which is
    /// reserved; the JSON keeps the number.
    @Test func leStatesAreListedByBitAndAReservedBitSaysSo() {
        let mask: UInt64 = 1 | 1 << 41 | 1 << 50
        let bytes = (0..<8).map { String(format: "%02x", UInt8(truncatingIfNeeded: mask >> UInt64($0 * 8))) }.joined()
        let lines = Self.complete(0x201c, bytes)
        #expect(lines == ["mask: 0x0004020000000001", "States: 3 supported", "  Non-connectable Advertising (bit 0)",
                                             "  Initiating + Connection (Peripheral Role) (bit 41)", "  reserved (bit 50)"], "\(lines)")
        let json = Self.decoded(.event(code: .commandComplete, parameters: [1, 0x1c, 0x20, 0] + [UInt8](hex: bytes)!)).json
        #expect(json["params"]?["mask"] == .int(Int(mask)), "\(json)")
    }

    /// Read Local Supported Commands (§7.4.2): each command the mask claims, in bit order
    /// with its octet and bit (§6.27), as btmon lists them.
    @Test func supportedCommandsAreListedByName() throws {
        let root = String(#filePath).components(separatedBy: "/Tests/").first ?? "."
        let trace = try TraceReader.read([UInt8](try Data(contentsOf: URL(fileURLWithPath: root + "/Fixtures/rootcanal-gatt-read.btsnoop"))))
        var d = FrameDecoder()
        let lines = trace.records.enumerated().flatMap { d.decode($1, number: $0 + 1, firstTimestamp: 0).details }
        // Rootcanal's mask has 213 bits set; every one is a command this stack can name.
        #expect(lines.contains("Commands: 213 claimed"))
        let listed = lines.filter { $0.hasSuffix(")") && $0.contains(" (octet ") }
        #expect(listed.count == 213 && !listed.contains { $0.contains("unknown command") }, "\(listed.prefix(5))")
        for line in ["  Inquiry (octet 0 bit 0)", "  Reset (octet 5 bit 7)", "  LE Set Extended Advertising Parameters (octet 36 bit 2)",
                     "  LE Read Buffer Size [v2] (octet 41 bit 5)"] {
            #expect(listed.contains(line), "\(line)")
        }
        // Built: octet 0 bit 5 (Disconnect), octet 14 bit 3 (Read Local Version
        // Information), bits btmon's table has not (octet 40 bit 4: LE Read Antenna
        // Information, 5.1; octet 45 bit 7: Set Min Encryption Key Size, 5.3; octet 48
        // bit 3: LE Enable OTA UTP Mode, 6.1) and octet 63 bit 7, which no command has.
        var mask = [UInt8](repeating: 0, count: 64)
        (mask[0], mask[14], mask[40], mask[45], mask[48], mask[63]) = (0x20, 0x08, 0x10, 0x80, 0x08, 0x80)
        let built = Self.complete(0x1002, mask.map { String(format: "%02x", $0) }.joined())
        #expect(Array(built.dropFirst()) == ["Commands: 6 claimed", "  Disconnect (octet 0 bit 5)", "  Read Local Version Information (octet 14 bit 3)",
                                             "  LE Read Antenna Information (octet 40 bit 4)", "  Set Min Encryption Key Size (octet 45 bit 7)",
                                             "  LE Enable OTA UTP Mode (octet 48 bit 3)", "  unknown command (octet 63 bit 7)"], "\(built)")
        // The JSON keeps the mask's bytes only.
        let json = Self.decoded(.event(code: .commandComplete, parameters: [1, 0x02, 0x10, 0] + mask)).json
        #expect(json["params"]?["supportedCommands"]?["bytes"] == .string(mask.hexString), "\(json)")
    }

    /// Every command with a Supported_Commands bit has a name, and each name a command
    /// line gives (`btctl hci NAME`) finds its own opcode: no two names collide.
    @Test func everyAssignedCommandIsNamedAndParsesBack() {
        for e in SupportedCommands.assigned {
            let op = HCIOpcode(rawValue: e.opcode)
            #expect(op.name != nil, "0x\(String(e.opcode, radix: 16))")
            if let name = op.name { #expect(HCIOpcode(parsing: name) == op, "\(name)") }
        }
        // The bits of the commands this stack sends come from the same table.
        #expect(SupportedCommands.bits[.reset]! == (5, 7) && SupportedCommands.bits[.leSetExtendedAdvertisingEnable]! == (36, 5))
        #expect(SupportedCommands.bits.count == 73)
    }

    @Test func theBriefViewAndOtherLayersAreUnchanged() {
        // SMP's own fields (snake_case) in the same sink get no HCI meaning.
        var d = FrameDecoder()
        let acl = ACLDataPacket(handle: 0x40, boundary: .firstFlushable, data: [0x07, 0x00, 0x06, 0x00, 0x01, 0x03, 0x00, 0x01, 0x10, 0x07, 0x07])
        let f = d.decode(TraceRecord(timestampMicros: 0, packet: .acl(acl), direction: .hostToController), number: 1, firstTimestamp: 0)
        #expect(f.details.allSatisfy { !$0.contains("ms)") && !$0.contains("dBm") }, "\(f.details)")
    }
}
