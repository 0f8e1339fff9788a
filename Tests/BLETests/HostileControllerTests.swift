// The whole host under a controller that lies, seeded: between the real packets of a
// virtual controller, the central's host (or, in the other half of the cases, the
// peripheral's) also receives events drawn from a seeded generator: Number Of Completed Packets for handles and counts nobody sent, Command
// Complete and Command Status for commands nobody issued (with any credit count),
// connections that appear and vanish, the live connection reported again, Disconnection Complete for unknown handles,
// encryption changes and key requests for unknown links and the live one, advertising reports, link
// parameter updates, hardware errors, unknown events and subevents, ACL data for
// unknown handles; each cut short or padded at times, while a Read RSSI is in flight.
// Between batches the central reads a characteristic of its real peripheral: the
// value must come every time (the host neither crashed nor hung, its ACL credits
// stayed right, the real link stayed up), the Read RSSI must have ended (a lie may
// have answered it) and the next must work; the link must still end in order.

import BLE
import BLETesting
import Foundation
import HCI
import NIOCore
import Synchronization
import Testing

/// A virtual controller whose host also receives what a test injects, on the host's
/// loop, between the controller's own packets; while `withholdsCompletedPackets`, the
/// host gets no Number Of Completed Packets (a controller whose buffers never drain).
/// Each packet the controller delivers reaches the host through `rewrite` (a faulty
/// controller's changes; by default none).
final class InjectingTransport: HCITransport {
    let base: VirtualController
    private let rewrite: @Sendable (HCIPacket) -> HCIPacket
    private let receiver = Mutex<(@Sendable (TransportInput) -> Void)?>(nil)
    private let withholding = Mutex(false)

    var withholdsCompletedPackets: Bool {
        get { withholding.withLock { $0 } }
        set { withholding.withLock { $0 = newValue } }
    }

    init(_ base: VirtualController, rewrite: @escaping @Sendable (HCIPacket) -> HCIPacket = { $0 }) {
        self.base = base
        self.rewrite = rewrite
    }

    var inbound: AsyncThrowingStream<HCIPacket, any Error> { base.inbound }
    func send(_ packet: HCIPacket) async throws { try await base.send(packet) }
    func close() async {
        receiver.withLock { $0 = nil }
        await base.close()
    }
    func deliver(on loop: any EventLoop, _ receive: @escaping @Sendable (TransportInput) -> Void) {
        receiver.withLock { $0 = receive }
        let rewrite = self.rewrite
        base.deliver(on: loop) { [weak self] input in
            guard case let .packets(packets) = input else { return receive(input) }
            guard self?.withholdsCompletedPackets == true else { return receive(.packets(packets.map(rewrite))) }
            let kept = packets.filter { if case .event(code: .numberOfCompletedPackets, _) = $0 { false } else { true } }
            if !kept.isEmpty { receive(.packets(kept.map(rewrite))) }
        }
    }
    var preferredLoop: (any EventLoop)? { base.preferredLoop }
    var sendsSynchronously: Bool { base.sendsSynchronously }
    func sendNow(_ packets: [HCIPacket]) throws { try base.sendNow(packets) }
    func sendNow(_ packet: HCIPacket) throws { try base.sendNow(packet) }

    /// Hands `packets` to the host after what the controller has delivered so far.
    func inject(_ packets: [HCIPacket]) async throws {
        guard let loop = base.preferredLoop, let receive = receiver.withLock({ $0 }) else { return }
        try await loop.submit { receive(.packets(packets)) }.get()
    }
}

/// Draws the lying controller's packets; `live` is the one real link, told of
/// encryption changes, key requests, parameter updates and completed packets it never
/// had, but never of its own disconnection.
private struct HostileEvents {
    var rng: SeededGenerator
    let live: UInt16

    init(seed: UInt64, live: UInt16) {
        rng = SeededGenerator(seed)
        self.live = live
    }

    mutating func u16(_ v: UInt16) -> [UInt8] { [UInt8(v & 0xFF), UInt8(v >> 8)] }

    /// A handle that is not the live link's, in any of its spellings.
    mutating func other() -> UInt16 {
        let h = rng.pick([0x0000, 0x0EFF, 0x0F00, 0xFFFF, UInt16.random(in: 0...0x0EFF, using: &rng), UInt16.random(in: .min ... .max, using: &rng)])
        // (Events carry 12-bit handles: 0x1041 names 0x041.)
        return h & 0x0FFF == live ? 0x0EFE : h
    }

    mutating func address() -> [UInt8] { rng.bytes(6) }

    mutating func le(_ subevent: UInt8, _ body: [UInt8]) -> HCIPacket { .event(code: .leMeta, parameters: mutated([subevent] + body)) }
    mutating func event(_ code: UInt8, _ body: [UInt8]) -> HCIPacket { .event(code: HCIEventCode(rawValue: code), parameters: mutated(body)) }

    mutating func mutated(_ p: [UInt8]) -> [UInt8] {
        if rng.chance(0.1) { return Array(p.prefix(Int.random(in: 0...p.count, using: &rng))) }
        if rng.chance(0.05) { return p + rng.bytes(Int.random(in: 1...20, using: &rng)) }
        return p
    }

    /// One batch: random lies, then every connection it invented disconnected (so
    /// their ACL credits come back, as a real controller's disconnection gives them)
    /// and a Command Complete for no command with one credit (a controller's NOP).
    mutating func batch(_ n: Int) -> [HCIPacket] {
        var out: [HCIPacket] = []
        var invented: [UInt16] = []
        for _ in 0..<n {
            switch Int.random(in: 0..<100, using: &rng) {
            case 0..<15:
                let handles = (0..<rng.pick([0, 1, 2, 3])).map { _ in rng.chance(0.6) ? live : other() }
                out.append(event(0x13, [UInt8(handles.count)] + handles.flatMap { u16($0) + u16(rng.pick([0, 1, 2, 8, 0xFFFF])) }))
            case 15..<27:
                let opcode = rng.pick([0x0000, 0x0C03, 0x1009, 0x1405, 0x1405, 0x2002, 0x200B, 0x2016, 0x201A, 0x2022, 0x0406, UInt16.random(in: .min ... .max, using: &rng)])
                out.append(event(0x0E, [rng.pick([0, 1, 1, 1, 5, 255])] + u16(opcode) + rng.bytes(rng.pick([0, 1, 4, 8]))))
            case 27..<35:
                out.append(event(0x0F, [rng.pick([0, 0x0C, 0x12, rng.byte()]), rng.pick([0, 1, 1, 5])] + u16(rng.pick([0x0406, 0x200D, 0x2043, UInt16.random(in: .min ... .max, using: &rng)]))))
            case 35..<43:
                // A connection the controller already reported, reported again (ignored,
                // as Linux does), or a new one.
                let again = rng.chance(0.15)
                let h = again ? live : UInt16(0x0100 + invented.count)
                if !again { invented.append(h) }
                let body = [rng.pick([0, 0, 0, 0x3E, rng.byte()])] + u16(h) + [rng.pick([0, 1, 2])] + [rng.pick([0, 1, 2, 3])] + address()
                    + u16(rng.pick([6, 24, 3200])) + u16(rng.pick([0, 499])) + u16(rng.pick([10, 3200])) + [rng.byte()]
                out.append(rng.chance(0.5) ? le(0x01, body) : le(0x0A, Array(body.prefix(12)) + rng.bytes(12) + Array(body.dropFirst(12))))
            case 43..<50:
                out.append(event(0x05, [rng.pick([0, rng.byte()])] + u16(other()) + [rng.pick([0x13, 0x08, rng.byte()])]))
            case 50..<55:
                out.append(event(0x08, [rng.pick([0, rng.byte()])] + u16(rng.chance(0.5) ? live : other()) + [rng.pick([0, 1, rng.byte()])]))
            case 55..<58:
                out.append(event(0x30, [rng.pick([0, rng.byte()])] + u16(rng.chance(0.5) ? live : other())))
            case 58..<62:
                out.append(le(0x05, u16(rng.chance(0.5) ? live : other()) + rng.bytes(10)))
            case 62..<70:
                out.append(le(rng.pick([0x02, 0x0D, 0x0B]), rng.bytes(rng.pick([0, 1, 12, Int.random(in: 0...60, using: &rng)]))))
            case 70..<78:
                let h = rng.chance(0.5) ? live : other()
                switch Int.random(in: 0..<5, using: &rng) {
                case 0: out.append(le(0x03, [rng.pick([0, rng.byte()])] + u16(h) + u16(rng.pick([6, 24, 3200])) + u16(rng.pick([0, 499])) + u16(rng.pick([10, 3200]))))
                case 1: out.append(le(0x07, u16(h) + u16(rng.pick([27, 251, 0xFFFF])) + u16(rng.pick([328, 2120])) + u16(rng.pick([27, 251, 0])) + u16(rng.pick([328, 2120]))))
                case 2: out.append(le(0x0C, [rng.pick([0, rng.byte()])] + u16(h) + [rng.pick([1, 2, 3, rng.byte()]), rng.pick([1, 2, 3, rng.byte()])]))
                case 3: out.append(le(0x04, [rng.pick([0, rng.byte()])] + u16(h) + rng.bytes(8)))
                default: out.append(le(0x14, u16(h) + [rng.pick([0, 1, rng.byte()])]))
                }
            case 78..<82:
                out.append(event(rng.pick([0x10, 0x1A, 0x0C]), rng.bytes(rng.pick([1, 8]))))
            case 82..<90:
                out.append(rng.chance(0.5) ? event(rng.byte(), rng.bytes(Int.random(in: 0...30, using: &rng))) : le(rng.byte(), rng.bytes(Int.random(in: 0...30, using: &rng))))
            default:
                let data = rng.bytes(Int.random(in: 0...40, using: &rng))
                out.append(.acl(ACLDataPacket(handle: other() & 0x0FFF, boundary: rng.pick([.firstNonFlushable, .continuing, .firstFlushable]), data: data)))
            }
        }
        for h in invented { out.append(.event(code: .disconnectionComplete, parameters: [0] + u16(h) + [0x13])) }
        out.append(.event(code: .commandComplete, parameters: [1, 0, 0]))
        return out
    }
}

@Suite(.timeLimit(.minutes(3))) struct HostileControllerTests {
    /// A controller whose buffers stop draining (no Number Of Completed Packets) does
    /// not keep the host from hanging up: what the link has queued is given 2 s, then
    /// Disconnect goes out anyway. (The facade first waited for the ATT bearer to hand
    /// every PDU to the controller, with no limit: the disconnect never returned.)
    @Test func aControllerWhoseBuffersNeverDrainCanStillBeHungUpOn() async throws {
        let radio = VirtualRadio()
        let peripheralAddress = BluetoothAddress("C0:00:00:00:0C:11")!
        let injecting = InjectingTransport(await radio.makeController(address: BluetoothAddress("C0:00:00:00:0C:12")!))
        let central = BluetoothHost(transport: injecting, logger: Bench.logger)
        let peripheral = BluetoothHost(transport: await radio.makeController(address: peripheralAddress), logger: Bench.logger)
        try await central.start()
        try await peripheral.start()
        defer { Task { await central.close(); await peripheral.close(); _ = radio } }
        try await peripheral.peripheral.add(Service(uuid: uuidA, characteristics: [
            Characteristic(uuid: uuidB, properties: [.read, .writeWithoutResponse], value: [1], answersManually: true),
        ]))
        let requests = await peripheral.peripheral.requests()
        try await peripheral.peripheral.startAdvertising(AdvertisingData())
        let remote = try await central.central.connect(to: peripheralAddress, within: .seconds(5))
        let c = try await remote.characteristic(uuidB)
        // A command's answer comes after the completions of what went before it: every
        // buffer is free again before the controller starts withholding.
        _ = try await remote.readRSSI()
        let credits = await central.controller.aclCredits, buffers = credits.total
        #expect(credits.available == buffers)
        injecting.withholdsCompletedPackets = true
        // More Write Commands than the controller has buffers: once the peer has as many
        // as there are buffers, the central's are all taken and the rest wait on the link.
        let writer = Task { for i in 0..<40 { try await remote.write([UInt8(i)], to: c, withResponse: false) } }
        #expect(await collect(requests, count: buffers, within: .seconds(5)).count == buffers)
        #expect(await central.controller.aclCredits.available == 0)
        // 2 s for the link's queue, 5 s for the controller's answer: well within 15 s.
        let hungUp = await firstElement(AsyncStream<Bool> { done in
            Task { _ = try? await remote.disconnect(); done.yield(true); done.finish() }
        }, within: .seconds(15))
        #expect(hungUp == true, "no answer from disconnect() in 15 s")
        writer.cancel()
    }

    /// Whose controller lies: the central's (which reads) or the peripheral's (which answers).
    enum Liar: String, CaseIterable, Sendable { case central, peripheral }

    @Test(arguments: SeededGenerator.seeds, Liar.allCases)
    func seededLiesFromTheControllerNeverStopTheLink(seed: UInt64, liar: Liar) async throws {
        let radio = VirtualRadio()
        let peripheralAddress = BluetoothAddress("C0:00:00:00:0C:01")!
        let centralController = await radio.makeController(address: BluetoothAddress("C0:00:00:00:0C:02")!)
        let peripheralController = await radio.makeController(address: peripheralAddress)
        let injecting = InjectingTransport(liar == .central ? centralController : peripheralController)
        let central = BluetoothHost(transport: liar == .central ? injecting : centralController, logger: Bench.logger,
                                    security: SecurityOptions(random: .seeded(seed)))
        let peripheral = BluetoothHost(transport: liar == .peripheral ? injecting : peripheralController, logger: Bench.logger)
        let lied = liar == .central ? central : peripheral
        try await central.start()
        try await peripheral.start()
        let value: [UInt8] = [0x5E, 0xED, UInt8(truncatingIfNeeded: seed)]
        try await peripheral.peripheral.add(Service(uuid: uuidA, characteristics: [Characteristic(uuid: uuidB, properties: [.read], value: value)]))
        try await peripheral.peripheral.startAdvertising(AdvertisingData())
        let remote = try await central.central.connect(to: peripheralAddress, within: .seconds(5))
        let characteristic = try await remote.characteristic(uuidB)
        // The live link's handle on the lying side.
        let live = try #require(await lied.connections.first?.handle)
        var lies = HostileEvents(seed: seed, live: live)
        let events = lied.connectionEvents()
        let seen = Mutex<[ConnectionEvent]>([])
        let watcher = Task { for await e in events { seen.withLock { $0.append(e) } } }

        for round in 0..<30 {
            // A command in flight as the lies arrive (Read RSSI; its answer usually comes
            // first: ControllerTests.answersToCommandsNobodySentLeaveTheOneInFlight is
            // the exact case), and one after them that must work.
            let command = Task<String?, Never> {
                do { _ = try await remote.readRSSI() } catch is HCIError {} catch is BLEError {} catch { return "\(type(of: error)): \(error)" }
                return nil
            }
            try await injecting.inject(lies.batch(20))
            let read = await firstElement(AsyncStream<Result<[UInt8], any Error>> { c in
                Task {
                    do { c.yield(.success(try await remote.read(characteristic))) } catch { c.yield(.failure(error)) }
                    c.finish()
                }
            }, within: .seconds(10))
            switch read {
            case .success(let v)?:
                #expect(v == value, "seed \(seed) (\(liar) lies), round \(round)")
                // Credits for packets nobody sent were not taken: no handle has fewer
                // than none out, and what is free and what is out add up to the
                // controller's buffers.
                let credits = await lied.controller.aclCredits
                #expect(credits.outstanding.values.allSatisfy { $0 > 0 }
                        && credits.available + credits.outstanding.values.reduce(0, +) == credits.total, "seed \(seed) (\(liar) lies), round \(round): \(credits)")
                // The command in flight ended, with a value or a typed error (a lie may
                // have answered it), within the command timeout; the next one works.
                let ended = await firstElement(AsyncStream<String?> { c in Task { c.yield(await command.value); c.finish() } }, within: .seconds(10))
                switch ended {
                case nil?: break
                case let what??: Issue.record("seed \(seed) (\(liar) lies), round \(round): Read RSSI ended with \(what)")
                case nil: Issue.record("seed \(seed) (\(liar) lies), round \(round): Read RSSI did not end in 10 s")
                }
                await #expect(throws: Never.self, "seed \(seed) (\(liar) lies), round \(round)") { _ = try await remote.readRSSI() }
            case .failure(let e)?:
                Issue.record("seed \(seed) (\(liar) lies), round \(round): the read failed: \(e)")
                return
            case nil:
                Issue.record("seed \(seed) (\(liar) lies), round \(round): no answer to the read in 10 s")
                return
            }
        }
        // The lies reached the host: connections it was told of came (the application
        // heard of them) and went (the host keeps only the real link).
        watcher.cancel()
        let invented = seen.withLock { $0 }.filter { if case let .connected(c) = $0 { return c.handle >= 0x0100 && c.handle < 0x0200 }; return false }
        #expect(!invented.isEmpty, "seed \(seed) (\(liar) lies): no invented link was heard of")
        let left = await lied.connections.map(\.handle)
        #expect(left == [live], "seed \(seed) (\(liar) lies): links left \(left)")
        #expect(try await remote.disconnect() == .connectionTerminatedByLocalHost)
        await central.close()
        await peripheral.close()
    }
}
