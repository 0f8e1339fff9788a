// Decode benchmark: frames per second for `btctl trace show` (text and --json) over a
// large mixed capture, with tshark decoding the same file in the same run as the
// reference: its full dissection (-V), its JSON (-T json) and its summary lines.
//
//   swift build -c release --product btctl
//   swift build -c release --product DecodeBenchmark
//   .build/release/DecodeBenchmark [--frames N] [--runs R] [--btctl PATH] [--tshark PATH] [--keep PATH]
//
// The capture mixes what a scanning, connected LE host sees: legacy and extended
// advertising reports (with AD structures), commands with Command Complete and Command
// Status, ATT over the fixed channel and over an EATT channel (opened by Credit Based
// Connection Request/Response at the start), L2CAP signaling, SMP pairing PDUs,
// connection updates and Number Of Completed Packets. Wall time and child CPU time are
// measured per run; the median run is reported.

import BenchmarkSupport
import Foundation
import HCI
import Snoop
import SMP
#if canImport(Glibc)
import Glibc
#endif

stopChildrenOnSignals()

var frames = 500_000
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
        FileHandle.standardError.write(Data("usage: DecodeBenchmark [--frames N] [--runs R] [--btctl PATH] [--tshark PATH] [--keep PATH]\n".utf8))
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
    func acl(_ l2cap: [UInt8], cid: UInt16, _ d: TraceRecord.Direction) {
        let len = UInt16(l2cap.count)
        put(.acl(ACLDataPacket(handle: 0x40, boundary: .firstNonFlushable, data: [UInt8(len & 0xFF), UInt8(len >> 8), UInt8(cid & 0xFF), UInt8(cid >> 8)] + l2cap)), d)
    }
    // EATT: Credit Based Connection Request (SPSM 0x0027, MTU 512, MPS 247, 10 credits, SCIDs 0x0040/0x0041)
    // and its response (DCIDs 0x0050/0x0051), so K-frames on those CIDs decode as ATT.
    acl([0x17, 1, 12, 0, 0x27, 0, 0x00, 0x02, 0xF7, 0, 10, 0, 0x40, 0, 0x41, 0], cid: 5, .hostToController)
    acl([0x18, 1, 12, 0, 0x00, 0x02, 0xF7, 0, 10, 0, 0, 0, 0x50, 0, 0x51, 0], cid: 5, .controllerToHost)
    let smp: [[UInt8]] = [
        SMPPDU.pairingRequest(PairingFeatures(ioCapability: .keyboardDisplay, authentication: [.bonding, .mitm, .secureConnections],
                                              initiatorKeys: [.encryptionKey, .identityKey], responderKeys: [.encryptionKey, .identityKey])).bytes,
        SMPPDU.pairingConfirm(Array(repeating: 0x5A, count: 16)).bytes,
        SMPPDU.pairingRandom(Array(repeating: 0xA5, count: 16)).bytes,
        SMPPDU.pairingFailed(.confirmValueFailed).bytes,
    ]
    var cycle = 0
    while i < frames {
        switch i % 20 {
        case 0...7:
            put(HCIEvent.le(.advertisingReport(LEAdvertisingReport(reports: [.init(eventType: 0, addressType: .random, address: peer, data: ad, rssi: -60)]))).packet, .controllerToHost)
        case 8:
            put(HCIEvent.le(.extendedAdvertisingReport(LEExtendedAdvertisingReport(reports: [.init(eventType: 0x13, addressType: .random, address: peer, rssi: -58, data: ad)]))).packet, .controllerToHost)
        case 9:
            put(ReadRSSI(connectionHandle: 0x40).packet, .hostToController)
        case 10:
            put(HCIEvent.commandComplete(CommandComplete(commandOpcode: .readRSSI, returning: ReadRSSI.ReturnParameters(connectionHandle: 0x40, rssi: -55))).packet, .controllerToHost)
        case 11:
            acl([0x0A, 0x2A, 0x00], cid: 4, .hostToController)
        case 12:
            acl([0x0B] + Array("fire!!!!".utf8), cid: 4, .controllerToHost)
        case 13:
            acl([0x1B, 0x2A, 0x00, 0x01], cid: 4, .controllerToHost)
        case 14:
            put(HCIEvent.numberOfCompletedPackets(NumberOfCompletedPackets(entries: [.init(connectionHandle: 0x40, numCompletedPackets: 1)])).packet, .controllerToHost)
        case 15:
            acl([0x16, UInt8(truncatingIfNeeded: cycle), 4, 0, 0x50, 0, 1, 0], cid: 5, .controllerToHost)  // Flow Control Credit Indication
        case 16:
            acl([5, 0, 0x1B, 0x2C, 0x00, 0x42, 0x43], cid: 0x0040, .controllerToHost)  // EATT K-frame: SDU length 5, a notification
        case 17:
            acl(smp[cycle % smp.count], cid: 6, cycle % 2 == 0 ? .hostToController : .controllerToHost)
        case 18:
            put(HCIEvent.commandStatus(CommandStatus(status: .success, commandOpcode: .leCreateConnection)).packet, .controllerToHost)
        default:
            put(HCIEvent.le(.connectionUpdateComplete(LEConnectionUpdateComplete(connectionHandle: 0x40, connectionInterval: 24, peripheralLatency: 0, supervisionTimeout: 500))).packet, .controllerToHost)
            cycle += 1
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
print("capture: \(frames) frames, \(size / 1024) KiB (btsnoop 1002): adv and extended adv reports, commands, ATT on CID 4 and EATT, signaling, SMP, NOCP")

var rows: [(String, Measurement)] = []
if FileManager.default.isExecutableFile(atPath: btctl) {
    rows.append(("btctl trace show --json", median(try (0..<runs).map { _ in try measure(btctl, ["trace", "show", "--json", path]) })))
    rows.append(("btctl trace show (text)", median(try (0..<runs).map { _ in try measure(btctl, ["trace", "show", path]) })))
} else {
    print("btctl not found at \(btctl): build it with `swift build -c release --product btctl`")
}
if FileManager.default.isExecutableFile(atPath: tshark) {
    rows.append(("tshark -V (full dissection)", median(try (0..<runs).map { _ in try measure(tshark, ["-r", path, "-V"]) })))
    rows.append(("tshark -T json", median(try (0..<runs).map { _ in try measure(tshark, ["-r", path, "-T", "json"]) })))
    rows.append(("tshark (summary lines)", median(try (0..<runs).map { _ in try measure(tshark, ["-r", path]) })))
} else {
    print("tshark not found at \(tshark): apt-get install tshark")
}
for (name, m) in rows {
    print(label(name) + String(format: "%10.0f frames/s  (wall %.2f s, cpu %.2f s, median of %d)", Double(frames) / m.wall, m.wall, m.cpu, runs))
}
let measured = rows
func wall(_ name: String) -> Double? { measured.first { $0.0 == name }?.1.wall }
if let full = wall("tshark -V (full dissection)"), let tjson = wall("tshark -T json") {
    for ours in ["btctl trace show --json", "btctl trace show (text)"] {
        guard let w = wall(ours) else { continue }
        print(ours + String(format: ": %.1fx the frames per second of tshark -V, %.1fx of tshark -T json", full / w, tjson / w))
    }
}
