// Memory of a host scanning many advertisers (a program that prints figures;
// docs/benchmarks.md): one `BluetoothHost` on the virtual radio scans N advertisers
// (each with its own name and a manufacturer-data payload) for S seconds with the
// known-device registry, the radio ticking every 100 ms (every advertiser heard
// once per tick). Prints the resident set size before the host starts, after it
// started, and every 10 s, with the registry's size and the reports seen.
//
//   swift build -c release --product ScanMemoryBenchmark
//   .build/release/ScanMemoryBenchmark [--advertisers 1000] [--seconds 60]

import BLE
import GAP
import HCI
import BenchmarkSupport
import Foundation
import Logging
import Synchronization
import VirtualHCI

stopChildrenOnSignals()

var advertisers = 1000, seconds = 60
var argv = CommandLine.arguments.dropFirst().makeIterator()
while let a = argv.next() {
    if a == "--advertisers", let n = argv.next().flatMap(Int.init) { advertisers = n }
    if a == "--seconds", let n = argv.next().flatMap(Int.init) { seconds = n }
}

/// VmRSS of this process, in KiB.
func rss() -> Int {
    guard let s = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
          let line = s.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }) else { return -1 }
    return Int(line.split(separator: " ").dropFirst().first ?? "") ?? -1
}

func line(_ label: String, _ extra: String = "") {
    say(label.padding(toLength: 30, withPad: " ", startingAt: 0) + String(format: "%8d KiB", rss()) + (extra.isEmpty ? "" : "  " + extra))
}

let logger = Logger(label: "bench") { _ in SwiftLogNoOpLogHandler() }
let radio = VirtualRadio()
say("advertisers \(advertisers), \(seconds) s, radio tick 100 ms")
line("RSS at start")
// Advertisers without a host: the commands an advertising host would send, straight to the controller.
for i in 0..<advertisers {
    let address = try BluetoothAddress(wireBytes: [UInt8(i & 0xFF), UInt8(i >> 8), 0x00, 0xAD, 0xBE, 0xC0])
    let c = await radio.makeController(address: address)
    var ad = AdvertisingData()
    ad.localName = "adv-\(i)"
    ad.manufacturerData = [AdvertisingData.ManufacturerData(companyIdentifier: 0xFFFF, data: Array(repeating: UInt8(i & 0xFF), count: 8))]
    try await c.send(LESetAdvertisingParameters(advertisingIntervalMin: 0x20, advertisingIntervalMax: 0x20, advertisingType: 0).packet)
    try await c.send(LESetAdvertisingData(data: try ad.encoded()).packet)
    try await c.send(LESetAdvertisingEnable(advertisingEnable: true).packet)
}
line("RSS with the advertisers")
let host = BluetoothHost(transport: await radio.makeController(address: BluetoothAddress("00:00:00:00:5C:A1")!), logger: logger)
try await host.start()
line("RSS with the host started")
let results = try await host.central.scan(filterDuplicates: false, capacity: 4096)
let seen = Mutex(0)
let counter = Task {
    for try await _ in results { seen.withLock { $0 += 1 } }
}
let t0 = ContinuousClock.now, c0 = cpu()
var next = 10
while ContinuousClock.now - t0 < .seconds(seconds) {
    await radio.tick()
    try await Task.sleep(for: .milliseconds(100))
    let elapsed = Int(BenchmarkSupport.seconds(ContinuousClock.now - t0))
    if elapsed >= next {
        next += 10
        let known = await host.central.knownPeripherals.count
        line("RSS after \(elapsed) s", "(\(known) known devices, \(results.dropped.count) results dropped by the scan stream)")
    }
}
let used = cpu() - c0
counter.cancel()  // the scan stops when its consumer does
let known = await host.central.knownPeripherals.count
line("RSS at the end", String(format: "(%d known devices; %d results; cpu %.1f s for %d s of scanning)", known, seen.withLock { $0 }, used, seconds))
