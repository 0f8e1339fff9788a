// The file bond store under a daemon's load (a program that prints figures;
// docs/benchmarks.md): N bonds in the file, then updates of one of them, as a bonded
// client's subscription change or a signed write's counter makes. Figures: wall and CPU
// time per update, with the file's size, for
//  - FileBondStore (each bond encoded once and kept; the file rewritten, fsync, rename);
//  - the same bonds with the whole file encoded again on every update, pretty-printed,
//    as FileBondStore did before (same write, fsync and rename);
//  - Bumble's JsonKeyStore in the same run (Benchmarks/bumble_keystore_bench.py: it
//    loads and rewrites the whole file on every update, without fsync), with bonds
//    holding what Bumble's hold (an LTK and an IRK).
// Our bonds are measured twice: holding keys alone (as Bumble's), and also a GATT layout
// of two services and two CCCD values, as a bonded client of a GATT server has. Last,
// the time to find a bonded peer by a resolvable private address among bonds with IRKs.
//
//   swift build -c release --product BondStoreBenchmark
//   .build/release/BondStoreBenchmark [--updates N]

import BenchmarkSupport
import Foundation
import HCI
import SMP
#if canImport(Glibc)
import Glibc
#endif

let updates: Int = {
    var updates = 50
    var argv = CommandLine.arguments.dropFirst().makeIterator()
    while let a = argv.next() {
        if a == "--updates", let n = argv.next().flatMap(Int.init), n > 0 { updates = n }
    }
    return updates
}()
let root = FileManager.default.currentDirectoryPath
let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bond-bench-\(getpid())").path
try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
defer { try? FileManager.default.removeItem(atPath: directory) }

func label(_ s: String) -> String { s + String(repeating: " ", count: max(1, 66 - s.count)) }

func bond(_ i: Int, layout: Bool) -> Bond {
    let a = (try? BluetoothAddress(wireBytes: [UInt8(i & 0xFF), UInt8(i >> 8 & 0xFF), 0, 0, 0x10, 0])) ?? .zero
    var b = Bond(address: a, addressType: .public,
                 keys: PairingKeys(peerLTK: LongTermKey(key: Array(repeating: 7, count: 16), authenticated: false, secureConnections: true),
                                   peerIdentity: IdentityKey(irk: Array(repeating: 9, count: 16), address: a, addressType: .public)))
    guard layout else { return b }
    b.clientConfigurations = [0x0010: 1, 0x0020: 2]
    b.database = CachedDatabase(hash: Array(repeating: 3, count: 16), services: [
        .init(uuid: "1800", start: 1, end: 5, primary: true, characteristics: [.init(uuid: "2A00", declaration: 2, value: 3, properties: 2, end: 3, descriptors: [])]),
        .init(uuid: "180F", start: 6, end: 9, primary: true,
              characteristics: [.init(uuid: "2A19", declaration: 7, value: 8, properties: 0x12, end: 9, descriptors: [.init(uuid: "2902", handle: 9)])]),
    ])
    return b
}

/// The store before: every change encodes every bond again, pretty-printed, then the
/// same atomic write (temporary file, fsync, rename).
final class WholeFileStore {
    struct File: Encodable { var version = 1; var bonds: [Bond] }
    let path: String
    var bonds: [Bond]
    init(path: String, bonds: [Bond]) { self.path = path; self.bonds = bonds }
    func save(_ bond: Bond) throws {
        bonds.removeAll { $0.isEntry(of: bond) }
        bonds.append(bond)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        let data = try encoder.encode(File(bonds: bonds))
        let temporary = path + ".tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw BondStoreError.io(path: temporary, errno: errno) }
        _ = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        fsync(fd)
        close(fd)
        rename(temporary, path)
    }
}

func size(_ path: String) -> Int { ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int) ?? 0 }

/// Fills a store with `n` bonds, then times `updates` saves of the middle one (a CCCD
/// value, or an LTK for keys alone, changing each time).
func measure(_ name: String, n: Int, layout: Bool, save: (Bond) throws -> Void, path: String) throws {
    var target = bond(n / 2, layout: layout)
    let t0 = ContinuousClock.now, c0 = cpu()
    for u in 0..<updates {
        if layout { target.clientConfigurations[0x0010] = UInt16(u & 1) } else { target.keys.peerLTK?.key[0] = UInt8(u & 0xFF) }
        try save(target)
    }
    let wall = seconds(ContinuousClock.now - t0) * 1000 / Double(updates), used = (cpu() - c0) * 1000 / Double(updates)
    say(label("\(name), \(n) bonds") + String(format: "%8.2f ms/update  %8.2f ms cpu/update  %8d B", wall, used, size(path)))
}

/// How long finding a bonded peer by one of its resolvable private addresses takes
/// among `n` bonds that each hold an IRK (`BondStore.bond(for:type:)`, as the Security
/// Manager looks a peer up when its link comes, at each CCCD write it stores, at each
/// signed write): the peer's IRK is the middle bond's, so half the IRKs are tried.
func lookups(n: Int) throws {
    let path = directory + "/lookups-\(n).json"
    let store = FileBondStore(path: path)
    for i in 0..<n {
        var b = bond(i, layout: false)
        b.keys.peerIdentity?.irk = (0..<16).map { UInt8(truncatingIfNeeded: i &* 31 &+ $0) }
        try store.save(b)
    }
    guard let irk = try store.bonds()[n / 2].keys.peerIdentity?.irk,
          let rpa = ResolvablePrivateAddress.generate(irk: irk, random: .seeded(1)) else { return }
    let rounds = 200
    let t0 = ContinuousClock.now, c0 = cpu()
    for _ in 0..<rounds { precondition(store.bond(for: rpa, type: .random) != nil) }
    let wall = seconds(ContinuousClock.now - t0) * 1e6 / Double(rounds), used = (cpu() - c0) * 1e6 / Double(rounds)
    say(label("ours  : a bonded peer found by its RPA, \(n) bonds with IRKs") + String(format: "%8.1f µs/lookup  %8.1f µs cpu/lookup", wall, used))
}

for n in [100, 1000] {
    for layout in [false, true] {
        let what = layout ? "keys, GATT layout, CCCDs" : "keys"
        let path = directory + "/ours-\(n)-\(layout).json"
        let store = FileBondStore(path: path)
        for i in 0..<n where i != n / 2 { try store.save(bond(i, layout: layout)) }
        try store.save(bond(n / 2, layout: layout))
        try measure("ours  : FileBondStore (\(what))", n: n, layout: layout, save: store.save, path: path)
        let before = directory + "/whole-\(n)-\(layout).json"
        let whole = WholeFileStore(path: before, bonds: try store.bonds())
        try measure("before: whole file encoded (\(what))", n: n, layout: layout, save: whole.save, path: before)
    }
    let python = root + "/.venv/bin/python"
    if FileManager.default.isExecutableFile(atPath: python) {
        let out = try output(of: python, [root + "/Benchmarks/bumble_keystore_bench.py", directory, String(n), String(updates)])
        if let o = try? JSONSerialization.jsonObject(with: out) as? [String: Any], let ms = o["ms_per_update"] as? Double, let bytes = o["bytes"] as? Int {
            say(label("bumble: JsonKeyStore (keys), \(n) bonds") + String(format: "%8.2f ms/update  %-22@  %8d B", ms, "(no fsync)" as NSString, bytes))
        } else {
            say("bumble: no figure (\(String(decoding: out, as: UTF8.self)))")
        }
    } else {
        say("bumble: .venv/bin/python missing (Scripts/setup.sh)")
    }
    try lookups(n: n)
}
