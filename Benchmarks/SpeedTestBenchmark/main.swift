// The seed's speed test as a benchmark: scan, connect, discover, read, disconnect,
// repeated; our central (the BLE facade) and Bumble's central, in the same run, on
// one Rootcanal against one Bumble peripheral. Prints wall time and CPU per
// session and per phase for both (median and mean over the sessions).
//
//   swift build -c release --product SpeedTestBenchmark
//   .build/release/SpeedTestBenchmark --sessions 20

import BLE
import BenchmarkSupport
import BLETesting
import Foundation
import Logging

stopChildrenOnSignals()

let root = String(#filePath).components(separatedBy: "/Benchmarks/").first ?? "."
let logger = Logger(label: "speed") { _ in SwiftLogNoOpLogHandler() }
var sessions = 20
var args = CommandLine.arguments.dropFirst()
while let a = args.popFirst() {
    if a == "--sessions", let v = args.popFirst().flatMap(Int.init), v > 0 { sessions = v } else {
        FileHandle.standardError.write(Data("usage: SpeedTestBenchmark [--sessions N]\n".utf8))
        exit(2)
    }
}

let phases = ["scan", "connect", "discover", "read", "disconnect", "session"]
typealias Sample = (wall: Double, cpu: Double)

/// Our central: the facade, one host, `n` sessions.
func ours(port: UInt16, target: BluetoothAddress, n: Int) async throws -> [String: [Sample]] {
    let host = try BluetoothHost.open("tcp:127.0.0.1:\(port)", logger: logger)
    try await host.start()
    var out: [String: [Sample]] = [:]
    for _ in 0..<n {
        let s0 = (ContinuousClock.now, cpu())
        var t = (ContinuousClock.now, cpu())
        func mark(_ name: String) {
            out[name, default: []].append((seconds(ContinuousClock.now - t.0), cpu() - t.1))
            t = (ContinuousClock.now, cpu())
        }
        guard let found = try await host.central.first(matching: ScanFilter(addresses: [target]), within: .seconds(20)) else {
            throw BLEError.notSupported("the Bumble peripheral did not advertise within 20 s")
        }
        mark("scan")
        let p = try await host.central.connect(to: found, within: .seconds(20))
        mark("connect")
        let services = try await p.discoverServices()
        mark("discover")
        guard let rw = services.lazy.compactMap({ $0.characteristic(BluetoothUUID(0xFFF1)) }).first else { throw BLEError.notSupported("no FFF1") }
        _ = try await p.read(rw)
        mark("read")
        try await p.disconnect()
        mark("disconnect")
        out["session", default: []].append((seconds(ContinuousClock.now - s0.0), cpu() - s0.1))
    }
    await host.close()
    return out
}

/// Bumble's central: the same steps in Python, timed by itself.
func bumble(python: String, port: UInt16, n: Int) throws -> [String: [Sample]]? {
    let data = try output(of: python, [root + "/Benchmarks/bumble_speed_test_central.py", String(port), "F1:F2:F3:F4:F5:F6", String(n)])
    guard let o = (try? JSONSerialization.jsonObject(with: data)) as? [String: [[String: Double]]] else { return nil }
    return o.mapValues { $0.map { ($0["wall"] ?? 0, $0["cpu"] ?? 0) } }
}

func median(_ xs: [Double]) -> Double {
    let s = xs.sorted()
    guard !s.isEmpty else { return .nan }
    return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
}
func mean(_ xs: [Double]) -> Double { xs.isEmpty ? .nan : xs.reduce(0, +) / Double(xs.count) }

func report(_ name: String, _ r: [String: [Sample]]) {
    for ph in phases {
        let xs = r[ph] ?? []
        let label = "\(name) \(ph)".padding(toLength: 20, withPad: " ", startingAt: 0)
        say(label + String(format: "wall median %7.1f ms  mean %7.1f ms   cpu median %6.1f ms  mean %6.1f ms   (n=%d)",
                           median(xs.map(\.wall)) * 1000, mean(xs.map(\.wall)) * 1000, median(xs.map(\.cpu)) * 1000, mean(xs.map(\.cpu)) * 1000, xs.count))
    }
}

say("== speed test: scan, connect (+MTU 517), discover all, read, disconnect; \(sessions) sessions each; Rootcanal 1.10.0, one Bumble peripheral")
let python = root + "/.venv/bin/python"
guard let rcPath = try? RootcanalProcess.locate(packageRoot: root), FileManager.default.isExecutableFile(atPath: python) else {
    say("skipped: needs .venv with rootcanal and bumble (Scripts/setup.sh)")
    exit(0)
}
let rc = try await RootcanalProcess.launch(binary: rcPath)
let server = try startBumbleServer(python: python, root: root, port: rc.hciPort)
defer {
    RootcanalProcess.kill(server)
    rc.stop()
}
try await Task.sleep(for: .seconds(3))
let o = try await ours(port: rc.hciPort, target: BluetoothAddress("F1:F2:F3:F4:F5:F6")!, n: sessions)
report("ours  ", o)
try await Task.sleep(for: .milliseconds(500))
if let b = try bumble(python: python, port: rc.hciPort, n: sessions) { report("bumble", b) } else { say("bumble central produced no figures") }
