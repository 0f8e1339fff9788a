// GATT benchmarks (a program that prints figures; docs/benchmarks.md):
//  1. notifications per second end to end over the virtual radio (MTU 23 and 247),
//     with both hosts on the radio's loop and with a host per core;
//     1a. the same through the BLE facade, as an application sends and takes them,
//     and Write Commands through it;
//     1b. an L2CAP credit-based channel over the virtual radio; 1c. reads over the
//     virtual radio, back to back and 45 ms apart (what a read costs the stack warm
//     and cold, with no transport's system calls);
//  2. over Rootcanal against one Bumble GATT server, ours and Bumble's own client in
//     the same run: ATT requests and time to discover everything, then host CPU per
//     read, per write and per KiB notified;
//  3. an L2CAP credit-based channel over Rootcanal between our host and Bumble's
//     (Benchmarks/bumble_l2cap_bench.py): bytes each way, CPU per MiB for both stacks.
//
//   swift build -c release --product GATTBenchmark
//   .build/release/GATTBenchmark [--count N] [--channel-bytes N]

import ATT
import BenchmarkSupport
import BLE
import BLETesting
import Foundation
import GAP
import GATT
import HCI
import L2CAP
import Logging
import NIOCore
import NIOPosix
import Snoop
import Synchronization
import Transports
#if canImport(Glibc)
import Glibc
#endif

stopChildrenOnSignals()

let logger = Logger(label: "bench") { _ in SwiftLogNoOpLogHandler() }
var count = 200
var argv = CommandLine.arguments.dropFirst().makeIterator()
var channelBytes = 256 * 1024
while let a = argv.next() {
    if a == "--count", let n = argv.next().flatMap(Int.init) { count = n }
    if a == "--channel-bytes", let n = argv.next().flatMap(Int.init), n > 0 { channelBytes = n }
}
let root = FileManager.default.currentDirectoryPath

func label(_ s: String) -> String { s + String(repeating: " ", count: max(1, 44 - s.count)) }

// MARK: 1. Virtual radio

/// Where the hosts of part 1 run.
enum Placement: String {
    /// The radio, both controllers and both hosts on one loop (the radio's default).
    case oneLoop = "one loop"
    /// Each host on a loop of its own, one per core of this machine (two here): the
    /// first (the sender of part 1) alone, the radio and its controllers with the
    /// second. (On a third loop of their own, the three threads share two cores, and
    /// part 1 ran at less than half the rate; with the sender, at four fifths.)
    case hostPerCore = "host per core"

    /// The loops a host per core runs on.
    static let hostLoops = Array(MultiThreadedEventLoopGroup(numberOfThreads: 2).makeIterator())
}

/// Two initialized L2CAP hosts on one virtual radio; `a` is the first one's address.
/// Keep `radio` alive while they talk (its controllers hold it weakly).
func twoHosts(_ placement: Placement = .oneLoop) async throws -> (radio: VirtualRadio, a: BluetoothAddress, ha: HCIController, hb: HCIController, la: L2CAPHost, lb: L2CAPHost) {
    // A host per core: the second host stays on the radio's loop, the first has its own.
    let radio = placement == .hostPerCore ? VirtualRadio(loop: Placement.hostLoops[1]) : VirtualRadio()
    let a = BluetoothAddress("00:00:00:00:00:0A")!
    let senderLoop = placement == .hostPerCore ? Placement.hostLoops[0] : nil
    let ha = HCIController(transport: await radio.makeController(address: a, hostLoop: senderLoop), logger: logger)
    let hb = HCIController(transport: await radio.makeController(address: BluetoothAddress("00:00:00:00:00:0B")!), logger: logger)
    try await ha.initialize(); try await hb.initialize()
    let la = L2CAPHost(controller: ha, logger: logger), lb = L2CAPHost(controller: hb, logger: logger)
    await la.start(); await lb.start()
    return (radio, a, ha, hb, la, lb)
}

/// Two hosts on one virtual radio, connected: a GATT server on the first with one
/// service (0xFFF0) holding `characteristic`, a started client on the second with the
/// MTU exchanged. Keep `radio` alive while they talk.
func gattPair(_ characteristic: GATTCharacteristic, mtu: UInt16, _ placement: Placement = .oneLoop) async throws
    -> (radio: VirtualRadio, ha: HCIController, hb: HCIController, server: GATTServer, service: ServiceHandles, client: GATTClient)? {
    let (radio, a, ha, hb, la, lb) = try await twoHosts(placement)
    var db = AttributeDatabase()
    let svc = try db.add(GATTService(uuid: BluetoothUUID(0xFFF0), characteristics: [characteristic]))
    let server = GATTServer(database: db, loop: ha.loop, logger: logger)
    let incoming = await la.newConnections()
    try await ha.send(LESetAdvertisingEnable(advertisingEnable: true))
    let link = try await TestCentral.connect(to: a, type: .public, host: lb, within: .seconds(5))
    var it = incoming.makeAsyncIterator()
    guard let pc = await it.next() else { return nil }
    // Larger ATT MTU comes with larger air PDUs (LE Data Length Extension). Each side
    // chooses what it sends, so both ask, as BlueZ and Bumble hosts set both up.
    if mtu > 23 {
        try await hb.send(LESetDataLength(connectionHandle: link.handle, txOctets: 251, txTime: 2120))
        try await ha.send(LESetDataLength(connectionHandle: pc.handle, txOctets: 251, txTime: 2120))
    }
    await server.attach(ATTBearer(channel: L2CAPATTChannel(host: la, handle: pc.handle), localRxMTU: mtu, logger: logger), connection: pc.handle)
    let client = GATTClient(bearer: ATTBearer(channel: L2CAPATTChannel(host: lb, handle: link.handle), localRxMTU: mtu, logger: logger))
    await client.start()
    try await client.exchangeMTU()
    return (radio, ha, hb, server, svc, client)
}

func virtualRadioNotifications(mtu: UInt16, payload: Int, n: Int, _ placement: Placement = .oneLoop) async throws {
    guard let (radio, ha, hb, server, svc, client) = try await gattPair(GATTCharacteristic(uuid: BluetoothUUID(0xFFF5), properties: [.notify]), mtu: mtu, placement)
    else { return }
    defer { withExtendedLifetime(radio) {} }
    let c = DiscoveredCharacteristic(uuid: BluetoothUUID(0xFFF5), declarationHandle: svc.characteristicValues[0] - 1, valueHandle: svc.characteristicValues[0], properties: [.notify], end: svc.end)
    // The receiving application takes each value as it arrives, on the loop
    // (`GATTClient.subscribe(deliver:ended:)`); the sending one runs on the loop too
    // (an actor whose executor is that loop), paced as the facade's notify is.
    let received = Mutex(0)
    let done = AsyncStream<Void>.makeStream()
    try await client.subscribe(c, cccd: svc.clientConfigurations[0] ?? 0, deliver: { _ in
        if received.withLock({ $0 += 1; return $0 }) == n { done.continuation.finish() }
    }, ended: { done.continuation.finish() })
    let value = [UInt8](repeating: 0x5A, count: payload)
    let t0 = ContinuousClock.now, c0 = cpu()
    if ProcessInfo.processInfo.environment["BENCH_NO_PREFERENCE"] != nil {
        await OnLoop(ha.loop).send(n: n, server: server, handle: c.valueHandle, value: value)
    } else if ProcessInfo.processInfo.environment["BENCH_SENDER_ACTOR"] == nil {
        // The sending code isolated to the server itself: each notify is a call on the
        // same actor, with no executor hop there and back.
        await withTaskExecutorPreference(ha.taskExecutor) {
            await sendIsolated(n: n, server: server, handle: c.valueHandle, value: value)
        }
    } else {
        await withTaskExecutorPreference(ha.taskExecutor) {
            await OnLoop(ha.loop).send(n: n, server: server, handle: c.valueHandle, value: value)
        }
    }
    for await _ in done.stream {}
    let got = received.withLock { $0 }
    let wall = seconds(ContinuousClock.now - t0), used = cpu() - c0
    let name = placement == .oneLoop ? "virtual radio" : "virtual radio, \(placement.rawValue)"
    say(label("\(name), MTU \(mtu), \(payload) B") + String(format: "%9.0f notifications/s  %8.1f KiB/s  (%d in %.2f s, cpu %.2f s)",
          Double(got) / wall, Double(got * payload) / 1024 / wall, got, wall, used))
    await ha.close(); await hb.close()
}

/// Notifications through the `BLE` facade, as an application sends and takes them:
/// two `BluetoothHost`s on one virtual radio, `PeripheralManager.notify` called `n`
/// times back to back (each returns once its notification is in the controller's
/// buffers), the central's values handed to a callback on its loop
/// (`RemotePeripheral.subscribe(to:onValue:)`). The sender is a plain task on the
/// cooperative pool calling `notify`, or one preferring the host's task executor
/// (TheRuntime.md), or a plain task sending through a `NotificationWriter`.
enum FacadeSender: String { case plainTask = "notify from a plain task", onLoop = "notify, sender prefers the loop", writer = "NotificationWriter from a plain task" }

func facadeNotifications(payload: Int, n: Int, sender: FacadeSender) async throws {
    let radio = VirtualRadio()
    let a = BluetoothAddress("00:00:00:00:00:0A")!
    let server = BluetoothHost(transport: await radio.makeController(address: a), logger: logger)
    let central = BluetoothHost(transport: await radio.makeController(address: BluetoothAddress("00:00:00:00:00:0B")!), logger: logger)
    try await server.start(); try await central.start()
    let c = Characteristic(uuid: BluetoothUUID(0xFFF5), properties: [.notify], value: [0])
    try await server.peripheral.add(Service(uuid: BluetoothUUID(0xFFF0), characteristics: [c]))
    try await server.peripheral.startAdvertising(AdvertisingData())
    let remote = try await central.central.connect(to: a, within: .seconds(5))
    let rc = try await remote.characteristic(BluetoothUUID(0xFFF5), in: BluetoothUUID(0xFFF0))
    let received = Mutex(0)
    let done = AsyncStream<Void>.makeStream()
    try await remote.subscribe(to: rc, onValue: { _ in
        if received.withLock({ $0 += 1; return $0 }) == n { done.continuation.finish() }
    }, ended: { _ in done.continuation.finish() })
    let value = [UInt8](repeating: 0x5A, count: payload)
    guard let link = await server.connections.first else { return }
    let mtu = await server.peripheral.maximumUpdateLength(for: link) + 3
    let t0 = ContinuousClock.now, c0 = cpu()
    let peripheral = server.peripheral
    switch sender {
    case .plainTask: for _ in 0..<n { try await peripheral.notify(c, value: value) }
    case .onLoop: try await withTaskExecutorPreference(server.taskExecutor) { for _ in 0..<n { try await peripheral.notify(c, value: value) } }
    case .writer:
        let writer = try await peripheral.notificationWriter(for: c)
        for _ in 0..<n { try await writer.send(value) }
        try await writer.flush()
    }
    for await _ in done.stream {}
    let got = received.withLock { $0 }
    let wall = seconds(ContinuousClock.now - t0), used = cpu() - c0
    say(label("facade, \(sender.rawValue)") + String(format: "%9.0f notifications/s  %8.1f KiB/s  (%d of %d B in %.2f s, cpu %.2f s, ATT MTU %d)",
          Double(got) / wall, Double(got * payload) / 1024 / wall, got, payload, wall, used, mtu))
    await central.close(); await server.close()
    withExtendedLifetime(radio) {}
}

/// Write Commands through the facade: the central writes `n` values of `payload` bytes
/// to a characteristic of the peripheral's, by `RemotePeripheral.write(_:to:withResponse:
/// false)` from a plain task, or by a `WriteWithoutResponseWriter` from a plain task;
/// the time runs until the peripheral's server has stored the last value (they are
/// taken in order).
func facadeWriteCommands(payload: Int, n: Int, writer useWriter: Bool) async throws {
    let radio = VirtualRadio()
    let a = BluetoothAddress("00:00:00:00:00:0A")!
    let server = BluetoothHost(transport: await radio.makeController(address: a), logger: logger)
    let central = BluetoothHost(transport: await radio.makeController(address: BluetoothAddress("00:00:00:00:00:0B")!), logger: logger)
    try await server.start(); try await central.start()
    let c = Characteristic(uuid: BluetoothUUID(0xFFF6), properties: [.writeWithoutResponse], permissions: [.write], value: [0])
    try await server.peripheral.add(Service(uuid: BluetoothUUID(0xFFF0), characteristics: [c]))
    try await server.peripheral.startAdvertising(AdvertisingData())
    let remote = try await central.central.connect(to: a, within: .seconds(5))
    let rc = try await remote.characteristic(BluetoothUUID(0xFFF6), in: BluetoothUUID(0xFFF0))
    let value = [UInt8](repeating: 0x5A, count: payload), last = [UInt8](repeating: 0xA5, count: payload)
    let t0 = ContinuousClock.now, c0 = cpu()
    if useWriter {
        let w = try await remote.writeWithoutResponseWriter(for: rc)
        for i in 0..<n { try await w.send(i == n - 1 ? last : value) }
        try await w.flush()
    } else {
        for i in 0..<n { try await remote.write(i == n - 1 ? last : value, to: rc, withResponse: false) }
    }
    let peripheral = server.peripheral
    while try await peripheral.value(of: c) != last { try await Task.sleep(for: .microseconds(200)) }
    let wall = seconds(ContinuousClock.now - t0), used = cpu() - c0
    say(label("facade, " + (useWriter ? "WriteWithoutResponseWriter" : "write(withResponse: false)"))
        + String(format: "%9.0f writes/s         %8.1f KiB/s  (%d of %d B in %.2f s, cpu %.2f s)",
                 Double(n) / wall, Double(n * payload) / 1024 / wall, n, payload, wall, used))
    await central.close(); await server.close()
    withExtendedLifetime(radio) {}
}

/// An L2CAP credit-based channel over the virtual radio: `total` bytes in SDUs of
/// `sdu` bytes, MPS 247 over 251-octet air PDUs, 32 credits, the receiver taking
/// each SDU on a task as an application would.
func virtualRadioChannel(total: Int, sdu: Int) async throws {
    let (radio, a, ha, hb, la, lb) = try await twoHosts()
    defer { withExtendedLifetime(radio) {} }
    let parameters = CreditBasedParameters(mtu: UInt16(sdu), mps: 247, initialCredits: 32)
    let accepted = await la.listen(spsm: 0x80, parameters: parameters)
    try await ha.send(LESetAdvertisingEnable(advertisingEnable: true))
    let link = try await TestCentral.connect(to: a, type: .public, host: lb, within: .seconds(5))
    try await hb.send(LESetDataLength(connectionHandle: link.handle, txOctets: 251, txTime: 2120))
    let sender = try await lb.connectChannel(spsm: 0x80, handle: link.handle, parameters: parameters)
    guard let receiver = await firstElement(accepted, within: .seconds(5), on: la.loop) else { return }
    let payload = [UInt8](repeating: 0x5A, count: sdu)
    let count = total / sdu
    let t0 = ContinuousClock.now, c0 = cpu()
    let receiving = Task {
        var bytes = 0
        for try await s in receiver.sdus {
            bytes += s.count
            if bytes >= count * sdu { break }
        }
        return bytes
    }
    try await withTaskExecutorPreference(hb.taskExecutor) {
        for _ in 0..<count { try await sender.send(payload) }
    }
    let got = try await receiving.value
    let wall = seconds(ContinuousClock.now - t0), used = cpu() - c0
    let mib = Double(got) / 1_048_576
    say(label("L2CAP channel, \(sdu) B SDUs") + String(format: "%9.1f MiB/s  %8.1f ms cpu/MiB  (%.0f MiB in %.2f s, cpu %.2f s)",
          mib / wall, used / mib * 1000, mib, wall, used))
    await ha.close(); await hb.close()
}

/// Reads over the virtual radio (no system calls: the controllers are in this process),
/// the caller on the client's loop: `n` back to back (warm), then `n` each after the
/// loop sat idle for `gap` (Rootcanal's connection event), then `n` such idle gaps
/// with no read, whose cost is taken off the second figure. What stays is what a read
/// costs our stack, both hosts' sides, when it runs cold after the loop slept; the rest
/// of a read over Rootcanal is the transport's wake-ups and system calls (part 2's floors).
func virtualRadioReads(n: Int, gapMilliseconds: Int64) async throws {
    let gap = Duration.milliseconds(gapMilliseconds)
    guard let (radio, ha, hb, server, svc, client) = try await gattPair(
        GATTCharacteristic(uuid: BluetoothUUID(0xFFF1), properties: [.read, .write], value: Array("benchmark!".utf8)), mtu: 23)
    else { return }
    defer { withExtendedLifetime((radio, server)) {} }
    let app = OnLoop(hb.loop), handle = svc.characteristicValues[0]
    try await withTaskExecutorPreference(hb.taskExecutor) {
        try await app.reads(n: n, client: client, handle: handle)  // first touches
        var c0 = cpu()
        try await app.reads(n: n, client: client, handle: handle)
        let warm = (cpu() - c0) / Double(n)
        c0 = cpu()
        try await app.reads(n: n, client: client, handle: handle, apart: gap)
        let apart = (cpu() - c0) / Double(n)
        c0 = cpu()
        try await app.idle(n: n, gap: gap)
        let idle = (cpu() - c0) / Double(n)
        say(label("virtual radio: read, back to back") + String(format: "%7.1f µs cpu/read", warm * 1e6))
        say(label("virtual radio: read, \(gapMilliseconds) ms apart") + String(format: "%7.1f µs cpu/read   (%.1f µs with the idle gap, %.1f µs the gap alone)",
              (apart - idle) * 1e6, apart * 1e6, idle * 1e6))
    }
    await ha.close(); await hb.close()
}

/// Application code isolated to a GATT server (an `isolated` parameter): its notify
/// calls are calls on the same actor.
func sendIsolated(n: Int, server: isolated GATTServer, handle: UInt16, value: [UInt8]) async {
    for _ in 0..<n { await server.notify(handle, value: value, waitUntilSent: true) }
}

/// Application code isolated to a host's event loop.
actor OnLoop {
    nonisolated let loop: any EventLoop
    nonisolated let executor: LoopExecutor
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
    init(_ loop: any EventLoop) { self.loop = loop; self.executor = LoopExecutor.of(loop) }

    func send(n: Int, server: GATTServer, handle: UInt16, value: [UInt8]) async {
        for _ in 0..<n { await server.notify(handle, value: value, waitUntilSent: true) }
    }

    func reads(n: Int, client: GATTClient, handle: UInt16) async throws {
        for _ in 0..<n { _ = try await client.read(handle) }
    }

    func writes(n: Int, client: GATTClient, handle: UInt16, value: [UInt8]) async throws {
        for _ in 0..<n { try await client.write(handle, value: value) }
    }

    /// Reads, each after the loop sat idle for `gap` (a timer on the loop, as a packet
    /// from the transport would wake it).
    func reads(n: Int, client: GATTClient, handle: UInt16, apart gap: Duration) async throws {
        for _ in 0..<n {
            try await idle(n: 1, gap: gap)
            _ = try await client.read(handle)
        }
    }

    /// The loop idle for `gap`, `n` times, with nothing else to do.
    func idle(n: Int, gap: Duration) async throws {
        for _ in 0..<n {
            try await loop.scheduleTask(in: TimeAmount(gap)) {}.futureResult.get()
        }
    }
}

// MARK: 2. Rootcanal + Bumble

/// Bytes counted by a callback, and one waiter for `until` of them (or the end).
final class Tally: Sendable {
    private let state = Mutex((count: 0, ended: false, waiter: CheckedContinuation<Void, Never>?.none))
    private let until: Int
    init(until: Int) { self.until = until }
    var count: Int { state.withLock { $0.count } }
    func add(_ n: Int) {
        state.withLock { s in
            s.count += n
            if s.count >= until { s.waiter.take()?.resume() }
        }
    }
    func end() { state.withLock { s in s.ended = true; s.waiter.take()?.resume() } }
    func wait() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            state.withLock { s in if s.count >= until || s.ended { c.resume() } else { s.waiter = c } }
        }
    }
}

struct Figures {
    var requests = 0; var discover = (0.0, 0.0); var read = (0.0, 0.0); var write = (0.0, 0.0); var notify = (0.0, 0.0); var bytes = 0
    /// Ours only: the same reads and writes from code isolated to the host's event loop.
    var onLoop: (read: (Double, Double), write: (Double, Double))?
    /// Ours only: the same notifications handed to a callback on the loop (Bumble's client's shape).
    var notifyByCallback = (0.0, 0.0); var bytesByCallback = 0
    /// Ours only: the same notifications from the stream, its consumer preferring the loop.
    var notifyOnLoop = (0.0, 0.0); var bytesOnLoop = 0
    /// Ours only: the value handle read and written, the notifying value's handle and its
    /// Client Characteristic Configuration, for the floor probe.
    var handle: UInt16 = 0; var burst: UInt16 = 0; var cccd: UInt16 = 0
}

let debug = ProcessInfo.processInfo.environment["BENCH_DEBUG"] != nil

/// `BENCH_DEBUG`'s count of the packets that came in, by kind. Counting costs a
/// dictionary update with an integer key; names are made only when printed, so the
/// tally adds next to nothing to the CPU it is printed beside.
struct InboundTally {
    /// Packet type in the high byte; the event code (or 0) in the next; the LE subevent
    /// (or 0) in the low byte.
    private var counts: [UInt32: Int] = [:]

    mutating func count(_ p: HCIPacket) {
        var key = UInt32(p.type.rawValue) << 16
        if case let .event(code, params) = p {
            key |= UInt32(code.rawValue) << 8
            if code.rawValue == 0x3E { key |= UInt32(params.first ?? 0) }
        }
        counts[key, default: 0] += 1
    }

    var described: [String: Int] {
        var out: [String: Int] = [:]
        for (key, n) in counts {
            let code = UInt8(truncatingIfNeeded: key >> 8), sub = UInt8(truncatingIfNeeded: key)
            let name = code == 0 ? "\(HCIPacketType(rawValue: UInt8(truncatingIfNeeded: key >> 16)))"
                : "event \(HCIEventCode(rawValue: code))" + (code == 0x3E ? " \(sub)" : "")
            out[name] = n
        }
        return out
    }
}

func ours(port: UInt16, target: BluetoothAddress, n: Int) async throws -> Figures {
    let requests = Mutex(0), inbound = Mutex(InboundTally())
    let base = try StreamTransports.tcp(host: "127.0.0.1", port: port, logger: logger)
    let tap = RecordingTransport(wrapping: base, now: { 0 }) { r in
        // Count ATT requests the host sends (first fragments on CID 4).
        if debug, r.direction == .controllerToHost, let p = r.packet { inbound.withLock { $0.count(p) } }
        if r.direction == .hostToController, case let .acl(p)? = r.packet, p.boundary != .continuing, p.data.count > 4,
           p.data[2] == 4, p.data[3] == 0, ATTOpcode(rawValue: p.data[4]).kind == .request { requests.withLock { $0 += 1 } }
    }
    let controller = HCIController(transport: tap, logger: logger)
    try await controller.initialize()
    if debug {
        let t = ContinuousClock.now
        for _ in 0..<50 { _ = try await controller.send(ReadBDADDR()) }
        print("50 Read BD_ADDR:", ContinuousClock.now - t)
    }
    let host = L2CAPHost(controller: controller, logger: logger)
    await host.start()
    let link = try await TestCentral.connect(to: target, type: .random, host: host, within: .seconds(20))
    let client = try await TestCentral.gattClient(on: link, host: host)
    var f = Figures()
    let before = requests.withLock { $0 }
    var t0 = ContinuousClock.now, c0 = cpu()
    let all = try await client.discoverAll()
    f.discover = (seconds(ContinuousClock.now - t0), cpu() - c0)
    f.requests = requests.withLock { $0 } - before
    let chars = all.flatMap(\.1)
    guard let rw = chars.first(where: { $0.0.uuid == BluetoothUUID(0xFFF1) })?.0,
          let (burst, ds) = chars.first(where: { $0.0.uuid == BluetoothUUID(0xFFF5) }),
          let cccd = ds.first(where: { $0.uuid == GATTType.clientCharacteristicConfiguration }) else { return f }
    f.handle = rw.valueHandle; f.burst = burst.valueHandle; f.cccd = cccd.handle
    inbound.withLock { $0 = InboundTally() }
    var u0 = rusage(); getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &u0)
    t0 = ContinuousClock.now; c0 = cpu()
    for _ in 0..<n { _ = try await client.read(rw.valueHandle) }
    if debug {
        var u1 = rusage(); getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &u1)
        let user = Double(u1.ru_utime.tv_sec - u0.ru_utime.tv_sec) * 1e6 + Double(u1.ru_utime.tv_usec - u0.ru_utime.tv_usec)
        let sys = Double(u1.ru_stime.tv_sec - u0.ru_stime.tv_sec) * 1e6 + Double(u1.ru_stime.tv_usec - u0.ru_stime.tv_usec)
        print("inbound during reads:", inbound.withLock { $0.described }, "user µs/read:", user / Double(n), "sys µs/read:", sys / Double(n),
              "voluntary switches/read:", Double(u1.ru_nvcsw - u0.ru_nvcsw) / Double(n))
    }
    f.read = (seconds(ContinuousClock.now - t0), cpu() - c0)
    t0 = ContinuousClock.now; c0 = cpu()
    for _ in 0..<n { try await client.write(rw.valueHandle, value: Array("benchmark!".utf8)) }
    f.write = (seconds(ContinuousClock.now - t0), cpu() - c0)
    let app = OnLoop(controller.loop)
    try await withTaskExecutorPreference(controller.taskExecutor) {
        t0 = ContinuousClock.now; c0 = cpu()
        try await app.reads(n: n, client: client, handle: rw.valueHandle)
        let readOnLoop = (seconds(ContinuousClock.now - t0), cpu() - c0)
        t0 = ContinuousClock.now; c0 = cpu()
        try await app.writes(n: n, client: client, handle: rw.valueHandle, value: Array("benchmark!".utf8))
        f.onLoop = (readOnLoop, (seconds(ContinuousClock.now - t0), cpu() - c0))
    }
    inbound.withLock { $0 = InboundTally() }
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &u0)
    t0 = ContinuousClock.now; c0 = cpu()
    let values = try await client.subscribe(burst, cccd: cccd.handle)
    var notified = 0
    for await v in values { f.bytes += v.count; notified += 1; if f.bytes >= 200 * 200 { break } }
    f.notify = (seconds(ContinuousClock.now - t0), cpu() - c0)
    if debug {
        var u1 = rusage(); getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &u1)
        print("inbound during notifications:", inbound.withLock { $0.described }, "notifications:", notified,
              "voluntary switches/notification:", Double(u1.ru_nvcsw - u0.ru_nvcsw) / Double(max(notified, 1)))
    }
    // The same burst again (subscribing again restarts it), each value handed to a
    // callback on the loop as it arrives: the shape of Bumble's client (`on_value`).
    let got = Tally(until: 200 * 200)
    t0 = ContinuousClock.now; c0 = cpu()
    try await client.subscribe(burst, cccd: cccd.handle, deliver: { got.add($0.count) }, ended: { got.end() })
    await got.wait()
    f.notifyByCallback = (seconds(ContinuousClock.now - t0), cpu() - c0)
    f.bytesByCallback = got.count
    // Once more, the stream consumed by a task that prefers the loop: each value resumes
    // the consumer on the loop, with no thread wake-up (TheRuntime.md).
    t0 = ContinuousClock.now; c0 = cpu()
    let onLoop = try await client.subscribe(burst, cccd: cccd.handle)
    let streamed = await withTaskExecutorPreference(controller.taskExecutor) {
        var bytes = 0
        for await v in onLoop { bytes += v.count; if bytes >= 200 * 200 { break } }
        return bytes
    }
    f.notifyOnLoop = (seconds(ContinuousClock.now - t0), cpu() - c0)
    f.bytesOnLoop = streamed
    await client.bearer.drain()
    _ = try? await controller.send(Disconnect(connectionHandle: link.handle))
    try await Task.sleep(for: .milliseconds(300))
    await controller.close()
    return f
}

func bumble(python: String, port: UInt16, n: Int) throws -> Figures? {
    let data = try output(of: python, [root + "/Benchmarks/bumble_gatt_bench_client.py", String(port), "F1:F2:F3:F4:F5:F6", String(n)])
    guard let o = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else { return nil }
    func pair(_ k: String) -> (Double, Double) {
        let d = o[k] as? [String: Double] ?? [:]
        return (d["wall"] ?? 0, d["cpu"] ?? 0)
    }
    return Figures(requests: o["discover_requests"] as? Int ?? 0, discover: pair("discover"), read: pair("read"), write: pair("write"),
                   notify: pair("notify"), bytes: o["notified_bytes"] as? Int ?? 0)
}

func report(_ name: String, _ f: Figures, n: Int) {
    say(label("\(name): discover everything") + String(format: "%3d ATT requests  %7.1f ms  (cpu %.1f ms)", f.requests, f.discover.0 * 1000, f.discover.1 * 1000))
    say(label("\(name): read") + String(format: "%7.1f µs cpu/read   %6.2f ms wall/read", f.read.1 / Double(n) * 1e6, f.read.0 / Double(n) * 1000))
    say(label("\(name): write") + String(format: "%7.1f µs cpu/write  %6.2f ms wall/write", f.write.1 / Double(n) * 1e6, f.write.0 / Double(n) * 1000))
    if let l = f.onLoop {
        say(label("\(name): read, caller on the loop") + String(format: "%7.1f µs cpu/read   %6.2f ms wall/read", l.read.1 / Double(n) * 1e6, l.read.0 / Double(n) * 1000))
        say(label("\(name): write, caller on the loop") + String(format: "%7.1f µs cpu/write  %6.2f ms wall/write", l.write.1 / Double(n) * 1e6, l.write.0 / Double(n) * 1000))
    }
    say(label("\(name): notifications") + perKiB(f.notify, bytes: f.bytes))
    if f.bytesOnLoop > 0 { say(label("\(name): notifications, consumer on the loop") + perKiB(f.notifyOnLoop, bytes: f.bytesOnLoop)) }
    if f.bytesByCallback > 0 { say(label("\(name): notifications, to a callback") + perKiB(f.notifyByCallback, bytes: f.bytesByCallback)) }
}

func perKiB(_ figure: (wall: Double, cpu: Double), bytes: Int) -> String {
    let kib = Double(bytes) / 1024
    return String(format: "%7.1f µs cpu/KiB    %6.1f KiB/s (%.0f KiB)", figure.cpu / max(kib, 1) * 1e6, kib / max(figure.wall, 1e-9), kib)
}

// BENCH_ONLY_READS=1: part 1c alone (for a profile of it).
let onlyReads = ProcessInfo.processInfo.environment["BENCH_ONLY_READS"] != nil
// BENCH_ONLY_VIRTUAL_CHANNEL=1: part 1b alone (for a profile of it).
let onlyVirtualChannel = ProcessInfo.processInfo.environment["BENCH_ONLY_VIRTUAL_CHANNEL"] != nil
say("== 1. notifications end to end over the virtual radio")
if ProcessInfo.processInfo.environment["BENCH_SKIP_VIRTUAL"] == nil, !onlyReads, !onlyVirtualChannel {
    // BENCH_NOTIFY_SCALE=k multiplies the counts (for a profile long enough to read).
    // A third of a second or more each: 20,000 and 50,000 took 30-90 ms, a window in
    // which the cold start (first touches, caches) weighs.
    let scale = ProcessInfo.processInfo.environment["BENCH_NOTIFY_SCALE"].flatMap(Int.init) ?? 1
    // BENCH_PLACEMENT=one or =core: only the hosts on one loop, or only a host per core.
    let placements: [Placement] = switch ProcessInfo.processInfo.environment["BENCH_PLACEMENT"] {
    case "one": [.oneLoop]
    case "core": [.hostPerCore]
    default: [.oneLoop, .hostPerCore]
    }
    for p in placements {
        try await virtualRadioNotifications(mtu: 23, payload: 20, n: 200_000 * scale, p)
        try await virtualRadioNotifications(mtu: 247, payload: 244, n: 500_000 * scale, p)
    }
}

// BENCH_ONLY_NOTIFY=1: part 1 alone (for a profile of it).
if ProcessInfo.processInfo.environment["BENCH_ONLY_NOTIFY"] != nil { exit(0) }

say("== 1a. the BLE facade over the virtual radio: notifications (to a callback subscription) and Write Commands (from a plain task)")
if ProcessInfo.processInfo.environment["BENCH_SKIP_VIRTUAL"] == nil, !onlyReads, !onlyVirtualChannel {
    let scale = ProcessInfo.processInfo.environment["BENCH_NOTIFY_SCALE"].flatMap(Int.init) ?? 1
    try await facadeNotifications(payload: 20, n: 20_000 * scale, sender: .plainTask)
    try await facadeNotifications(payload: 20, n: 100_000 * scale, sender: .onLoop)
    try await facadeNotifications(payload: 20, n: 100_000 * scale, sender: .writer)
    try await facadeWriteCommands(payload: 20, n: 20_000 * scale, writer: false)
    try await facadeWriteCommands(payload: 20, n: 100_000 * scale, writer: true)
}

say("== 1b. an L2CAP credit-based channel over the virtual radio (sender on the loop, receiver a task)")
if ProcessInfo.processInfo.environment["BENCH_SKIP_VIRTUAL"] == nil, ProcessInfo.processInfo.environment["BENCH_NOTIFY_SCALE"] == nil, !onlyReads {
    try await virtualRadioChannel(total: 64 * 1_048_576, sdu: 4096)
    try await virtualRadioChannel(total: 64 * 1_048_576, sdu: 65535 - 65535 % 244)
}
if onlyVirtualChannel { exit(0) }

say("== 1c. reads over the virtual radio, the caller on the loop: warm, and cold after the loop idled as between connection events")
if ProcessInfo.processInfo.environment["BENCH_SKIP_VIRTUAL"] == nil, ProcessInfo.processInfo.environment["BENCH_NOTIFY_SCALE"] == nil {
    try await virtualRadioReads(n: count, gapMilliseconds: 45)
}

if ProcessInfo.processInfo.environment["BENCH_ONLY_VIRTUAL"] != nil || onlyReads { exit(0) }
let onlyChannel = ProcessInfo.processInfo.environment["BENCH_ONLY_CHANNEL"] != nil
let python = root + "/.venv/bin/python"
if !onlyChannel {
say("== 2. Rootcanal, one Bumble GATT server; our client and Bumble's, same run (\(count) reads, \(count) writes, 200×200 B notified)")
if let rcPath = try? RootcanalProcess.locate(packageRoot: root), FileManager.default.isExecutableFile(atPath: python) {
    // BENCH_BUSY_CPUS=1: every CPU kept busy by a lowest-priority spinner during part 2.
    let spinners = ProcessInfo.processInfo.environment["BENCH_BUSY_CPUS"] != nil ? try startSpinners() : []
    defer { stopSpinners(spinners) }
    if !spinners.isEmpty { say("(\(spinners.count) spinners at the lowest priority keep every CPU busy)") }
    let rc = try await RootcanalProcess.launch(binary: rcPath)
    let server = try startBumbleServer(python: python, root: root, port: rc.hciPort)
    try await Task.sleep(for: .seconds(3))
    let o = try await ours(port: rc.hciPort, target: BluetoothAddress("F1:F2:F3:F4:F5:F6")!, n: count)
    report("ours  ", o, n: count)
    try await Task.sleep(for: .milliseconds(500))
    // Blocking on purpose: the probe is one thread doing only system calls, first as a
    // blocking reader, then with the system calls of an event loop.
    for (polled, name) in [(false, "raw H4, blocking"), (true, "raw H4, poll")] {
        if o.handle != 0, let floor = floorRequests(port: rc.hciPort, target: BluetoothAddress("F1:F2:F3:F4:F5:F6")!, handle: o.handle,
                                                    burst: (o.burst, o.cccd), n: count, polled: polled) {
            say(label("floor : read (\(name))") + String(format: "%7.1f µs cpu/read   %6.2f ms wall/read", floor.read.1 / Double(count) * 1e6, floor.read.0 / Double(count) * 1000))
            say(label("floor : write (\(name))") + String(format: "%7.1f µs cpu/write  %6.2f ms wall/write", floor.write.1 / Double(count) * 1e6, floor.write.0 / Double(count) * 1000))
            if let n = floor.notify { say(label("floor : notifications (\(name))") + perKiB(n.figure, bytes: n.bytes)) }
        } else {
            say("floor : the raw H4 probe (\(name)) got no answer")
        }
        try await Task.sleep(for: .milliseconds(500))
    }
    let wake = idleWakeUpFloor(n: count, gap: .milliseconds(45))
    say(label("floor : a wake-up from idle (poll(2), 45 ms)") + String(format: "%7.1f µs cpu/wake-up  (a read or a write has two)", wake * 1e6))
    let loopWake = try await idleLoopWakeUpFloor(n: count, gap: .milliseconds(45))
    say(label("floor : the same through a NIO event loop") + String(format: "%7.1f µs cpu/wake-up", loopWake * 1e6))
    // The same two 1 ms apart, where the caches and the vCPU are still warm: what
    // NIO's turn itself costs, against what it costs after 45 ms asleep.
    let warmWake = idleWakeUpFloor(n: count, gap: .milliseconds(1))
    let warmLoopWake = try await idleLoopWakeUpFloor(n: count, gap: .milliseconds(1))
    say(label("floor : both, 1 ms apart (warm)") + String(format: "%7.1f µs cpu/wake-up  (poll(2)), %.1f µs through NIO", warmWake * 1e6, warmLoopWake * 1e6))
    if let b = try bumble(python: python, port: rc.hciPort, n: count) { report("bumble", b, n: count) } else { print("bumble client produced no figures") }
    RootcanalProcess.kill(server)
    rc.stop()
} else {
    say("skipped: needs .venv with rootcanal and bumble (Scripts/setup.sh)")
}
}

// MARK: 3. An L2CAP channel over Rootcanal, ours against Bumble's

/// Our host opens an LE credit-based channel to Bumble's SPSM 0x0080 (MTU 4096, MPS
/// 247, 32 credits each way), sends `total` bytes in 4 KiB SDUs,
/// then takes as many back; Bumble times its own receiving and sending.
func channelAgainstBumble(python: String, port: UInt16, total: Int) async throws {
    let bumble = Process()
    bumble.executableURL = URL(fileURLWithPath: python)
    bumble.arguments = [root + "/Benchmarks/bumble_l2cap_bench.py", String(port), String(total)]
    let out = Pipe()
    bumble.standardOutput = out
    bumble.standardError = FileHandle.nullDevice
    try bumble.run()
    defer { RootcanalProcess.kill(bumble) }
    try await Task.sleep(for: .seconds(3))
    let controller = HCIController(transport: try StreamTransports.tcp(host: "127.0.0.1", port: port, logger: logger), logger: logger)
    try await controller.initialize()
    let host = L2CAPHost(controller: controller, logger: logger)
    await host.start()
    let link = try await TestCentral.connect(to: BluetoothAddress("F1:F2:F3:F4:F5:F6")!, type: .random, host: host, within: .seconds(20))
    // Rootcanal 1.10 does not know LE Set Data Length (Unknown HCI Command): its air PDUs stay as they are.
    _ = try? await controller.send(LESetDataLength(connectionHandle: link.handle, txOctets: 251, txTime: 2120))
    let channel = try await host.connectChannel(spsm: 0x80, handle: link.handle, parameters: CreditBasedParameters(mtu: 4096, mps: 247, initialCredits: 32))
    let piece = min(4096, channel.maximumSendSize)
    var t0 = ContinuousClock.now, c0 = cpu()
    var sent = 0
    while sent < total {
        let n = min(piece, total - sent)
        try await channel.send([UInt8](repeating: UInt8(sent & 0xFF), count: n))
        sent += n
    }
    let tx = (seconds(ContinuousClock.now - t0), cpu() - c0)
    var got = 0
    var sdus = channel.sdus.makeAsyncIterator()
    t0 = ContinuousClock.now; c0 = cpu()
    while got < total, let sdu = try await sdus.next() { got += sdu.count }
    let rx = (seconds(ContinuousClock.now - t0), cpu() - c0)
    _ = try? await controller.send(Disconnect(connectionHandle: link.handle))
    try await Task.sleep(for: .milliseconds(300))
    await controller.close()
    let lines = String(decoding: await Task.detached { out.fileHandleForReading.readDataToEndOfFile() }.value, as: UTF8.self)
    let figures = lines.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        .first { $0["event"] as? String == "figures" }
    let mib = Double(total) / 1_048_576
    func row(_ who: String, _ wall: Double, _ cpuSeconds: Double) {
        say(label(who) + String(format: "%8.1f ms cpu/MiB  %7.1f KiB/s  (%.0f KiB in %.2f s, cpu %.3f s)",
                                cpuSeconds / mib * 1000, Double(total) / 1024 / wall, Double(total) / 1024, wall, cpuSeconds))
    }
    row("ours → bumble: ours sending", tx.0, tx.1)
    if let f = figures, let w = f["rx_wall"] as? Double, let c = f["rx_cpu"] as? Double { row("ours → bumble: bumble receiving", w, c) }
    row("bumble → ours: ours receiving", rx.0, rx.1)
    if let f = figures, let w = f["tx_wall"] as? Double, let c = f["tx_cpu"] as? Double { row("bumble → ours: bumble sending", w, c) }
    if figures == nil { say("bumble printed no figures: \(lines)") }
}

say("== 3. an L2CAP channel over Rootcanal, our host against Bumble's (\(channelBytes / 1024) KiB each way, 4 KiB SDUs)")
if let rcPath = try? RootcanalProcess.locate(packageRoot: root), FileManager.default.isExecutableFile(atPath: python) {
    let rc = try await RootcanalProcess.launch(binary: rcPath)
    try await channelAgainstBumble(python: python, port: rc.hciPort, total: channelBytes)
    rc.stop()
} else {
    say("skipped: needs .venv with rootcanal and bumble (Scripts/setup.sh)")
}
