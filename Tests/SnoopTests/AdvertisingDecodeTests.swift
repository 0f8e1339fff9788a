import Foundation
import HCI
import Testing

@testable import Snoop

/// What `trace show` says an AD structure means, as btmon says it: on a phone's scan
/// we captured (Fixtures/android-scan.btsnoop) and on values built from the Core
/// Specification Supplement, Part A, §1 for each type with a meaning.
@Suite(.timeLimit(.minutes(3)))
struct AdvertisingDecodeTests {
    /// The detail lines and the JSON `ad` objects of one advertising report holding `data`.
    static func decoded(_ data: [UInt8]) -> (lines: [String], ad: [JSONValue]) {
        let report = HCIEvent.le(.advertisingReport(LEAdvertisingReport(reports: [
            .init(eventType: 0, addressType: .random, address: BluetoothAddress("C0:01:02:03:04:05")!, data: data, rssi: -70),
        ])))
        var d = FrameDecoder()
        let f = d.decode(TraceRecord(timestampMicros: 0, packet: report.packet, direction: .controllerToHost), number: 1, firstTimestamp: 0)
        guard case let .array(reports)? = f.json["reports"], case let .array(ad)? = reports.first?["ad"] else { return (f.details, []) }
        return (f.details, ad)
    }

    /// One AD structure's meaning, in the text (the parenthesis after the value) and in
    /// JSON (`meaning`), which must agree.
    static func meaning(type: UInt8, _ value: [UInt8]) -> String? {
        let (lines, ad) = decoded([UInt8(value.count + 1), type] + value)
        let json: String? = if case let .string(m)? = ad.first?["meaning"] { m } else { nil }
        let line = lines.first { $0.contains("AD 0x" + hex(type, 2)) }
        let text = line.flatMap { l in l.hasSuffix(")") ? l.range(of: " (").map { String(l[$0.upperBound...].dropLast()) } : nil }
        #expect(json == text, "text \(lines), JSON \(ad)")
        return json
    }

    @Test func aPhonesScanReadsAsBtmonWouldShowIt() throws {
        let root = String(#filePath).components(separatedBy: "/Tests/").first ?? "."
        let trace = try TraceReader.read([UInt8](try Data(contentsOf: URL(fileURLWithPath: root + "/Fixtures/android-scan.btsnoop"))))
        var d = FrameDecoder()
        let lines = trace.records.enumerated().flatMap { d.decode($1, number: $0 + 1, firstTimestamp: 0).details }
        #expect(lines.contains("  AD 0x01 Flags: 06 (LE General Discoverable Mode, BR/EDR Not Supported)"), "\(lines.prefix(12))")
        #expect(lines.contains("  AD 0x0a Tx Power Level: fe (-2 dBm)"), "\(lines.prefix(12))")
        // No name is assigned to this 128-bit UUID: its canonical text, most significant
        // octet first (the AD value is little-endian).
        #expect(lines.contains("  AD 0x06 Incomplete List of 128-bit Service UUIDs: 615577678b3d32b4e04e8e53744d4461 (61444D74-538E-4EE0-B432-3D8B67775561)"),
                "\(lines.prefix(12))")
        #expect(lines.contains("  AD 0x19 Appearance: 8001 (Remote Control)"))
    }

    @Test func flagsNameEachBitAndTheReservedOnes() {
        #expect(Self.meaning(type: 0x01, [0x05]) == "LE Limited Discoverable Mode, BR/EDR Not Supported")
        #expect(Self.meaning(type: 0x01, [0x18]) == "Simultaneous LE and BR/EDR (Controller), Simultaneous LE and BR/EDR (Host)")
        #expect(Self.meaning(type: 0x01, [0x22]) == "LE General Discoverable Mode, reserved bits 0x20")
        #expect(Self.meaning(type: 0x01, [0x00]) == "none")
        #expect(Self.meaning(type: 0x01, []) == nil)
    }

    @Test func powerIntervalsRoleAndAddresses() {
        #expect(Self.meaning(type: 0x0A, [0x7F]) == "127 dBm")
        #expect(Self.meaning(type: 0x0A, [0x80]) == "-128 dBm")
        #expect(Self.meaning(type: 0x0A, [0x00, 0x00]) == nil)  // one octet, or no meaning
        // Peripheral Connection Interval Range: 1.25 ms units, 0xFFFF for no bound.
        #expect(Self.meaning(type: 0x12, [0x06, 0x00, 0x18, 0x00]) == "7.5 ms to 30 ms")
        #expect(Self.meaning(type: 0x12, [0xFF, 0xFF, 0x50, 0x00]) == "no specific to 100 ms")
        #expect(Self.meaning(type: 0x12, [0x06, 0x00, 0x18]) == nil)
        // Advertising Interval: 0.625 ms units; the long form in 3 or 4 octets.
        #expect(Self.meaning(type: 0x1A, [0xA0, 0x00]) == "100 ms")
        #expect(Self.meaning(type: 0x1A, [0x01, 0x00]) == "0.6 ms")
        #expect(Self.meaning(type: 0x2F, [0x00, 0x00, 0x01]) == "40960 ms")
        #expect(Self.meaning(type: 0x2F, [0xFF, 0xFF, 0xFF, 0xFF]) == "2684354559.4 ms")
        #expect(Self.meaning(type: 0x2F, [0x01, 0x00]) == nil)
        #expect(Self.meaning(type: 0x1C, [0x02]) == "Peripheral and Central Role supported, Peripheral preferred")
        #expect(Self.meaning(type: 0x1C, [0x04]) == nil)  // reserved
        #expect(Self.meaning(type: 0x1B, [0x05, 0x04, 0x03, 0x02, 0x01, 0xC0, 0x01]) == "C0:01:02:03:04:05 (random)")
        #expect(Self.meaning(type: 0x1B, [0x05, 0x04, 0x03, 0x02, 0x01, 0xC0]) == nil)
        #expect(Self.meaning(type: 0x17, [1, 2, 3, 4, 5, 6, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F]) == "06:05:04:03:02:01, 0F:0E:0D:0C:0B:0A")
        #expect(Self.meaning(type: 0x18, [1, 2, 3]) == nil)
    }

    @Test func uuidsByNameElseTheirDigits() {
        #expect(Self.meaning(type: 0x03, [0x0F, 0x18, 0x0A, 0x18]) == "Battery Service, Device Information")
        #expect(Self.meaning(type: 0x05, [0x78, 0x56, 0x34, 0x12]) == "12345678")
        #expect(Self.meaning(type: 0x05, [0x0F, 0x18, 0x00, 0x00]) == "Battery Service")
        #expect(Self.meaning(type: 0x07, Array(0..<16)) == "0F0E0D0C-0B0A-0908-0706-050403020100")
        #expect(Self.meaning(type: 0x07, Array(0..<15)) == nil)  // not whole UUIDs
        #expect(Self.meaning(type: 0x16, [0x0F, 0x18, 0x64]) == "Battery Service")
        #expect(Self.meaning(type: 0x20, [0x78, 0x56, 0x34, 0x12, 0x01]) == "12345678")
        #expect(Self.meaning(type: 0x21, Array(0..<16) + [1]) == "0F0E0D0C-0B0A-0908-0706-050403020100")
        #expect(Self.meaning(type: 0x21, Array(0..<15)) == nil)
        #expect(Self.meaning(type: 0xFF, [0x4C, 0x00, 0x02, 0x15]) == "Apple, Inc.")
    }
}
