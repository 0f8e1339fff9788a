// Decode benchmark: frames per second for `btctl trace show --json` over a large
// capture, with tshark decoding the same file in the same run as the reference.
//
//   swift build -c release --product btctl --product DecodeBenchmark
//   .build/release/DecodeBenchmark [--frames N] [--runs R] [--btctl PATH] [--tshark PATH]
//
// The capture mixes what a scanning, connected LE host sees: advertising reports
// (with AD structures), commands and their Command Complete, ACL data carrying ATT,
// and Number Of Completed Packets. Wall time and child CPU time are measured per run;
// the median run is reported.

import Foundation
import HCI
import Snoop
#if canImport(Glibc)
import Glibc
#endif

var frames = 200_000
var runs = 3
var btctl = ".build/release/btctl"
var tshark = "/usr/bin/tshark"
var keep: String?
var args = CommandLine.arguments.dropFirst().makeIterator()
while let a = args.next() {
    switch a {
    case "--frames": frames = Int(args.next() ?? "") ?? frames
    case "--runs": runs = Int(args.next() ?? "") ?? runs
    case "--btctl": btctl = args.next() ?? btctl
    case "--tshark": tshark = args.next() ?? tshark
    case "--keep": keep = args.next()
    default:
        FileHandle.standardError.write(Data("usage: DecodeBenchmark [--frames N] [--runs R] [--btctl PATH] [--tshark PATH]\n".utf8))
        exit(2)
    }
}

func makeCapture(path: String, frames: Int) throws {
    let writer = try TraceFileWriter(path: path)
    defer { writer.close() }
    var ts: Int64 = 1_700_000_000_000_000
    let peer = BluetoothAddress("C0:11:22:33:44:55")!
    let ad = ADStructure.encode([ADStructure(type: 1, data: [6]), ADStructure(type: 9, data: Array("bench-device".utf8)),
                                 ADStructure(type: 0x03, data: [0x0F, 0x18]), ADStructure(type: 0xFF, data: [0x4C, 0, 2, 0x15])])
    var i = 0
    func put(_ p: HCIPacket, _ d: TraceRecord.Direction) {
        ts += 625
        writer.write(TraceRecord(timestampMicros: ts, packet: p, direction: d))
        i += 1
    }
    while i < frames {
        switch i % 10 {
        case 0, 1, 2, 3:
            put(HCIEvent.le(.advertisingReport(LEAdvertisingReport(reports: [.init(eventType: 0, addressType: .random, address: peer, data: ad, rssi: -60)]))).packet, .controllerToHost)
        case 4:
            put(ReadRSSI(connectionHandle: 0x40).packet, .hostToController)
        case 5:
            put(HCIEvent.commandComplete(CommandComplete(commandOpcode: .readRSSI, returning: ReadRSSI.ReturnParameters(connectionHandle: 0x40, rssi: -55))).packet, .controllerToHost)
        case 6:
            put(.acl(ACLDataPacket(handle: 0x40, boundary: .firstNonFlushable, data: [3, 0, 4, 0, 0x0A, 0x2A, 0x00])), .hostToController)
        case 7:
            put(.acl(ACLDataPacket(handle: 0x40, boundary: .firstFlushable, data: [9, 0, 4, 0, 0x0B] + Array("fire!!!!".utf8))), .controllerToHost)
        case 8:
            put(HCIEvent.numberOfCompletedPackets(NumberOfCompletedPackets(entries: [.init(connectionHandle: 0x40, numCompletedPackets: 1)])).packet, .controllerToHost)
        default:
            put(.acl(ACLDataPacket(handle: 0x40, boundary: .firstFlushable, data: [5, 0, 4, 0, 0x1B, 0x2A, 0x00, 0x01])), .controllerToHost)
        }
    }
}

struct Measurement { var wall: Double; var cpu: Double }

func childCPU() -> Double {
    var u = rusage()
    getrusage(__rusage_who_t(RUSAGE_CHILDREN.rawValue), &u)
    return Double(u.ru_utime.tv_sec) + Double(u.ru_utime.tv_usec) / 1e6 + Double(u.ru_stime.tv_sec) + Double(u.ru_stime.tv_usec) / 1e6
}

func measure(_ exe: String, _ arguments: [String]) throws -> Measurement {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: exe)
    p.arguments = arguments
    p.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
    p.standardError = FileHandle(forWritingAtPath: "/dev/null")
    let cpu0 = childCPU()
    let t0 = ContinuousClock.now
    try p.run()
    p.waitUntilExit()
    let wall = ContinuousClock.now - t0
    guard p.terminationStatus == 0 else { throw NSError(domain: "bench", code: Int(p.terminationStatus), userInfo: [NSLocalizedDescriptionKey: "\(exe) exited \(p.terminationStatus)"]) }
    return Measurement(wall: Double(wall.components.seconds) + Double(wall.components.attoseconds) / 1e18, cpu: childCPU() - cpu0)
}

func label(_ s: String) -> String { s + String(repeating: " ", count: max(1, 28 - s.count)) }

func median(_ ms: [Measurement]) -> Measurement { ms.sorted { $0.wall < $1.wall }[ms.count / 2] }

let path = keep ?? FileManager.default.temporaryDirectory.appendingPathComponent("decode-bench-\(getpid()).btsnoop").path
defer { if keep == nil { try? FileManager.default.removeItem(atPath: path) } }
try makeCapture(path: path, frames: frames)
let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
print("capture: \(frames) frames, \(size / 1024) KiB (btsnoop 1002): adv reports, commands, ACL/ATT, NOCP")

// In-process: decode + JSON render, the work `trace show --json` does, without process start-up.
do {
    let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
    let t0 = ContinuousClock.now
    let trace = try TraceReader.read(bytes)
    let out = OutputBuffer(capacity: 1 << 20)
    var decoder = FrameDecoder()
    for (i, r) in trace.records.enumerated() { decoder.write(r, number: i + 1, firstTimestamp: 0, style: .json, into: out) }
    let d = ContinuousClock.now - t0
    let s = Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    print(label("in-process decode+JSON") + String(format: "%10.0f frames/s  (%.2f s, %d bytes of JSON)", Double(trace.records.count) / s, s, out.count))
}

var rows: [(String, Measurement)] = []
if FileManager.default.isExecutableFile(atPath: btctl) {
    rows.append(("btctl trace show --json", median(try (0..<runs).map { _ in try measure(btctl, ["trace", "show", "--json", path]) })))
} else {
    print("btctl not found at \(btctl): build it with `swift build -c release --product btctl`")
}
if FileManager.default.isExecutableFile(atPath: tshark) {
    rows.append(("tshark -T json", median(try (0..<runs).map { _ in try measure(tshark, ["-r", path, "-T", "json"]) })))
    rows.append(("tshark (summary lines)", median(try (0..<runs).map { _ in try measure(tshark, ["-r", path]) })))
} else {
    print("tshark not found at \(tshark): apt-get install tshark")
}
for (name, m) in rows {
    print(label(name) + String(format: "%10.0f frames/s  (wall %.2f s, cpu %.2f s, median of %d)", Double(frames) / m.wall, m.wall, m.cpu, runs))
}
if rows.count >= 2 {
    print(String(format: "btctl vs tshark -T json: %.1fx the frames per second", rows[1].1.wall / rows[0].1.wall))
}
