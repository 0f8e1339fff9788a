// The facade's promises beyond the seed's tests: timeouts and cancellation end
// with LE Create Connection Cancel, states arrive in order, manual answers reach
// the peer, Write Commands are paced instead of dropped, and full buffers count.

import BLE
import BLETesting
import GATT
import HCI
import Snoop
import NIOCore
import NIOPosix
import Synchronization
import Testing

@Suite(.timeLimit(.minutes(3))) struct FacadeTests {
    @Test func statesGoIdleInitializingReady() async throws {
        let radio = VirtualRadio()
        let host = BluetoothHost(transport: await radio.makeController(address: BluetoothAddress("C0:00:00:00:00:09")!), logger: Bench.logger)
        let states = host.states()
        try await host.start()
        await host.close()
        let seen = await collect(states, count: 10, within: .seconds(5))
        #expect(seen.count == 4)
        #expect(Array(seen.prefix(3)) == [.idle, .initializing, .ready])
        guard case .transportClosed? = seen.last else { Issue.record("\(seen)"); return }
    }

    @Test func connectTimesOutAndCancelsTheAttempt() async throws {
        let room = try await Room(peripherals: 1)
        defer { Task { await room.close() } }
        let nobody = BluetoothAddress("C0:DE:AD:00:00:00")!
        await #expect(throws: BLEError.connectionTimeout(nobody, within: .milliseconds(100))) {
            _ = try await room.central.central.connect(to: nobody, within: .milliseconds(100))
        }
        // The controller was told to give up: a new attempt is accepted (not Command Disallowed).
        try await room.peripherals[0].peripheral.startAdvertising(AdvertisingData())
        let r = try await room.central.central.connect(to: room.addresses[0], within: .seconds(5))
        try await r.disconnect()
    }

    @Test func cancellingConnectEndsItAtOnce() async throws {
        // The controller's answers to LE Create Connection (taken on) and to its Cancel (succeeded),
        // as they reach the host.
        let (taken, takenOn) = AsyncStream<Void>.makeStream()
        let (cancelled, cancelledOn) = AsyncStream<Bool>.makeStream()
        let room = try await Room(peripherals: 1) { r in
            guard r.direction == .controllerToHost, case let .event(code, parameters)? = r.packet,
                  let e = try? HCIEvent(code: code, parameters: parameters) else { return }
            switch e {
            case let .commandStatus(s) where s.commandOpcode == .leCreateConnection && s.status.isSuccess: takenOn.yield()
            case let .commandComplete(c) where c.commandOpcode == .leCreateConnectionCancel: cancelledOn.yield(c.status?.isSuccess == true)
            default: break
            }
        }
        defer { Task { await room.close() } }
        let central = room.central.central
        let attempt = Task { try await central.connect(to: BluetoothAddress("C0:DE:AD:00:00:01")!, within: .seconds(30)) }
        // Cancelled once the controller has taken the attempt on.
        #expect(await firstElement(taken, within: .seconds(5)) != nil)
        let start = ContinuousClock.now
        attempt.cancel()
        await #expect(throws: CancellationError.self) { _ = try await attempt.value }
        #expect(ContinuousClock.now - start < .seconds(2))
        // The controller was told to give up, and did.
        #expect(await firstElement(cancelled, within: .seconds(5)) == true)
        try await room.peripherals[0].peripheral.startAdvertising(AdvertisingData())
        let r = try await central.connect(to: room.addresses[0], within: .seconds(5))
        try await r.disconnect()
    }

    @Test func manualAnswersReachThePeer() async throws {
        let pair = try await Pair()
        defer { Task { await pair.room.close() } }
        let dynamic = Characteristic(uuid: uuidB, properties: [.read, .write], value: Array("stored".utf8), answersManually: true)
        try await pair.server.peripheral.add(Service(uuid: uuidA, characteristics: [dynamic]))
        let rc = try await pair.remote.characteristic(uuidB)
        // No consumer yet: the stored value answers.
        #expect(try await pair.remote.read(rc) == Array("stored".utf8))
        let requests = await pair.server.peripheral.requests()
        let long = (0..<700).map { UInt8($0 & 0xFF) }
        let answerer = Task {
            var answered: [ReadWriteRequest.Kind] = []
            for await r in requests {
                answered.append(r.kind)
                switch r.kind {
                case .read: await r.respond(with: long)
                case let .write(v, _): if v == [0xFF] { await r.respond(error: ATTErrorCode(rawValue: 0x80)) } else { await r.respond() }
                }
                if answered.count == 3 { break }
            }
            return answered
        }
        // 700 bytes at MTU 517: one Read gives ATT_MTU − 1 = 516, past the 512 an attribute value may have.
        #expect(try await pair.remote.read(rc) == Array(long.prefix(516)))
        try await pair.remote.write([1], to: rc)
        await #expect(throws: BLEError.att(ATTErrorCode(rawValue: 0x80), handle: rc.valueHandle)) { try await pair.remote.write([0xFF], to: rc) }
        // Longer than one Write Request takes at ATT_MTU 517, so prepared writes: judged
        // whole at execution, longer than the 512 a value may have, so the server refuses
        // it and the app is not asked.
        await #expect(throws: BLEError.att(.invalidAttributeValueLength, handle: rc.valueHandle)) {
            try await pair.remote.write([UInt8](repeating: 7, count: 600), to: rc)
        }
        let kinds = await firstElement(AsyncStream { c in Task { c.yield(await answerer.value); c.finish() } }, within: .seconds(5))
        answerer.cancel()
        #expect(kinds == [.read(offset: 0), .write(value: [1], withResponse: true), .write(value: [0xFF], withResponse: true)])
        // Answered manually: the stored value was not touched.
        #expect(try await pair.server.peripheral.value(of: dynamic) == Array("stored".utf8))
    }

    /// Write Commands to a characteristic answered manually reach `requests()` in the
    /// order the central sent them, each once.
    @Test func manualWriteCommandsArriveInOrder() async throws {
        let pair = try await Pair()
        defer { Task { await pair.room.close() } }
        let sink = Characteristic(uuid: uuidB, properties: [.writeWithoutResponse], value: [], answersManually: true)
        try await pair.server.peripheral.add(Service(uuid: uuidA, characteristics: [sink]))
        let rc = try await pair.remote.characteristic(uuidB)
        let requests = await pair.server.peripheral.requests()
        for i in 0..<200 { try await pair.remote.write([UInt8(i)], to: rc, withResponse: false) }
        let got = await collect(requests, count: 200, within: .seconds(10))
        #expect(got.map(\.kind) == (0..<200).map { .write(value: [UInt8($0)], withResponse: false) })
    }

    /// A consumer of `requests()` that lets go of the stream with a request taken but
    /// not answered: the stored value answers it at once, not the 20 s timeout.
    @Test func aRequestLeftUnansweredIsAnsweredFromTheStoredValue() async throws {
        let pair = try await Pair()
        defer { Task { await pair.room.close() } }
        let dynamic = Characteristic(uuid: uuidB, properties: [.read], value: Array("stored".utf8), answersManually: true)
        try await pair.server.peripheral.add(Service(uuid: uuidA, characteristics: [dynamic]))
        let rc = try await pair.remote.characteristic(uuidB)
        let remote = pair.remote
        let read: Task<[UInt8], any Error>
        do {
            // The consumer first: a read that came before it would be answered from the
            // stored value at once (as a loaded machine once made it, and this waited on
            // `next()` for ever).
            let requests = await pair.server.peripheral.requests()
            read = Task { try await remote.read(rc) }
            #expect(await firstElement(requests, within: .seconds(5))?.kind == .read(offset: 0))
        }
        let start = ContinuousClock.now
        #expect(try await read.value == Array("stored".utf8))
        #expect(ContinuousClock.now - start < .seconds(5))
    }

    @Test func writeCommandsArePacedNotDropped() async throws {
        let pair = try await Pair()
        defer { Task { await pair.room.close() } }
        let sink = Characteristic(uuid: uuidB, properties: [.writeWithoutResponse])
        try await pair.server.peripheral.add(Service(uuid: uuidA, characteristics: [sink]))
        let rc = try await pair.remote.characteristic(uuidB)
        let events = pair.server.peripheral.events()
        // 200 commands of 100 bytes: far more than the controller's 8 buffers hold at once.
        for i in 0..<200 { try await pair.remote.write([UInt8(i)] + Array(repeating: 0, count: 99), to: rc, withResponse: false) }
        let got = await collect(events, count: 200, within: .seconds(10))
        #expect(got.count == 200)
        #expect(got.compactMap { if case let .written(_, v, _) = $0 { v.first } else { nil } } == (0..<200).map { UInt8($0) })
        #expect(events.dropped.count == 0)
        // Too long for one command: refused, not truncated.
        await #expect(throws: BLEError.self) { try await pair.remote.write(Array(repeating: 0, count: 600), to: rc, withResponse: false) }
    }

    @Test func aFullScanBufferCountsWhatItDropped() async throws {
        let room = try await Room(peripherals: 2)
        defer { Task { await room.close() } }
        try await room.peripherals[0].peripheral.startAdvertising(AdvertisingData())
        let results = try await room.central.central.scan(capacity: 2)
        // A second scan, for the other peripheral only: the host offers each report to
        // every scan in one call on its loop, in the order the controller sent them.
        let marker = try await room.central.central.scan(filter: ScanFilter(addresses: [room.addresses[1]]))
        // The first peripheral's advertisement and scan response: 2 when the scan
        // started and 2 per tick.
        for _ in 0..<10 { await room.radio.tick() }
        // Then the second peripheral's: once it reaches the marker scan (and the call that
        // offered it has returned), every report before it has met the full buffer.
        try await room.peripherals[1].peripheral.startAdvertising(AdvertisingData())
        #expect(await firstElement(marker, within: .seconds(5))?.address == room.addresses[1])
        try await room.radio.loop.submit {}.get()
        // 22 reports of the first peripheral, and 1 or 2 of the second's, into a buffer of 2.
        #expect((20...22).contains(results.dropped.count), "\(results.dropped.count)")
        #expect(await collect(results, count: 2, within: .seconds(2)).count == 2)
    }
}

@Suite(.timeLimit(.minutes(3))) struct LinkParameterTests {
    @Test func bothRolesUpdateParametersAndOptionalCommandsAreTolerated() async throws {
        let pair = try await Pair()
        defer { Task { await pair.room.close() } }
        // Central: LE Connection Update; both sides see the complete event.
        let peripheralSide = pair.server.connectionEvents()
        let p = try #require(try await pair.remote.updateParameters(intervalMin: 0x10, intervalMax: 0x10, supervisionTimeout: 0x100, within: .seconds(5)))
        #expect(p == ConnectionParameters(interval: 0x10, latency: 0, supervisionTimeout: 0x100))
        let seen = await collect(peripheralSide, count: 1, within: .seconds(5))
        guard case let .parametersUpdated(c, 0x10, 0, 0x100)? = seen.first else { Issue.record("\(seen)"); return }
        #expect(c.role == .peripheral)
        // Peripheral: the L2CAP request, which our central accepts (within §4.20's ranges) and applies.
        let asked = try await pair.server.updateParameters(c, intervalMin: 0x18, intervalMax: 0x28, latency: 2, supervisionTimeout: 0x200, within: .seconds(5))
        #expect(asked?.latency == 2 && asked?.supervisionTimeout == 0x200 && (0x18...0x28).contains(asked?.interval ?? 0))
        // Data length: the virtual controller has it. PHY: a legacy one answers Unknown HCI Command, which means nil, not an error.
        #expect(try await pair.room.central.updateDataLength(pair.remote.connection) != nil)
        #expect(try await pair.room.central.updatePHY(pair.remote.connection) == nil)
        await #expect { try await pair.remote.phy() } throws: { e in
            if case BLEError.notSupported = e { return true } else { return false }
        }
    }
}

@Suite(.timeLimit(.minutes(3))) struct BothGATTRolesTests {
    @Test func thePeripheralUsesTheCentralsServerOnTheSameLink() async throws {
        let pair = try await Pair()
        defer { Task { await pair.room.close() } }
        // The central publishes a service; the peripheral reaches it over the link the central made.
        let clock = Characteristic(uuid: uuidC, properties: [.read, .notify], value: [12, 0])
        try await pair.room.central.peripheral.add(Service(uuid: uuidA, characteristics: [clock]))
        let link = try #require(await pair.server.connections.first)
        #expect(link.role == .peripheral)
        let central = try #require(await pair.server.gattPeer(on: link))
        let rc = try await central.characteristic(uuidC, in: uuidA)
        #expect(try await central.read(rc) == [12, 0])
        let ticks = try await central.subscribe(to: rc)
        try await pair.room.central.peripheral.notify(clock, value: [13, 0])
        #expect(await collect(ticks, count: 1, within: .seconds(5)) == [[13, 0]])
        // Meanwhile the central's own client still works on the same bearer.
        #expect(try await pair.remote.discoverServices().contains { $0.uuid == BluetoothUUID(0x1800) })
        // And the peripheral-side peer is not a "connected peripheral" of the central role.
        #expect(await pair.server.central.connectedPeripherals.isEmpty)
    }
}

/// L2CAP channels through the facade: a peripheral publishes an SPSM, the central
/// opens a channel from its RemotePeripheral, SDUs both ways, a refused SPSM, and the
/// channel ending with the link's reason.
@Suite(.timeLimit(.minutes(3))) struct FacadeChannelTests {
    @Test func publishOpenSendClose() async throws {
        let pair = try await Pair()
        defer { Task { await pair.room.close() } }
        let incoming = await pair.server.publishChannel(spsm: 0x0080, parameters: CreditBasedParameters(mtu: 2000, mps: 100, initialCredits: 3))
        await #expect(throws: L2CAPChannelError.refused(.spsmNotSupported)) { _ = try await pair.remote.openChannel(spsm: 0x0081) }
        let ours = try await pair.remote.openChannel(spsm: 0x0080)
        let theirs = try #require(await firstElement(incoming, within: .seconds(5)))
        #expect(ours.maximumSendSize == 2000 && theirs.info.remoteCID == ours.info.localCID)
        let big = (0..<2000).map { UInt8($0 % 251) }
        try await ours.send(big)
        var it = theirs.sdus.makeAsyncIterator()
        #expect(try await it.next() == big)
        try await theirs.send([0xAB])
        var back = ours.sdus.makeAsyncIterator()
        #expect(try await back.next() == [0xAB])
        // The link goes: both ends' sequences throw with the reason.
        _ = try await pair.remote.disconnect()
        await #expect(throws: L2CAPChannelError.closed(.linkLost(.connectionTerminatedByLocalHost))) { _ = try await back.next() }
        await #expect(throws: L2CAPChannelError.closed(.linkLost(.remoteUserTerminatedConnection))) { _ = try await it.next() }
    }
}

/// The GATT client over enhanced ATT bearers (EATT): our central opens bearers to a
/// peripheral that takes them, operations run on several bearers at once, values
/// come packed in Multiple Handle Value Notifications, and a server without EATT
/// says so.
@Suite(.timeLimit(.minutes(3))) struct EATTClientTests {
    @Test func operationsRunOnSeveralBearersAtOnce() async throws {
        let room = try await Room(peripherals: 1, enhancedATT: true)
        defer { Task { await room.close() } }
        let server = room.peripherals[0]
        let manual = Characteristic(uuid: uuidB, properties: [.read], value: [0], answersManually: true)
        let a = Characteristic(uuid: uuidC, properties: [.read, .notify], value: [1])
        let b = Characteristic(uuid: BluetoothUUID(0xFFF7), properties: [.read, .notify], value: [2])
        try await server.peripheral.add(Service(uuid: uuidA, characteristics: [manual, a, b]))
        try await server.peripheral.startAdvertising(AdvertisingData())
        let remote = try await room.central.central.connect(to: room.addresses[0], within: .seconds(5))
        let rc = try await remote.characteristic(uuidB)
        #expect(try await remote.openEnhancedBearers(count: 3) == 3)
        let handle = try #require(await server.server.connections.first)
        #expect(await server.server.clientSupportedFeatures(connection: handle) == ClientSupportedFeatures.eatt | ClientSupportedFeatures.multipleHandleValueNotifications)
        // Four reads at once: the application holds each request, so on one bearer only
        // the first could arrive before it is answered; with three enhanced bearers and
        // the unenhanced one, all four do.
        let requests = await server.peripheral.requests()
        let reads = (0..<4).map { _ in Task { try await remote.read(rc) } }
        let held = await collect(requests, count: 4, within: .seconds(5))
        try #require(held.count == 4)
        // (Requests came on every bearer, so the server has attached all three.)
        #expect(await server.server.enhancedBearers(connection: handle) == 3)
        for (i, r) in held.enumerated() { await r.respond(with: [UInt8(i)]) }
        var values: [[UInt8]] = []
        for t in reads { values.append(try await t.value) }
        #expect(values.sorted { $0[0] < $1[0] } == [[0], [1], [2], [3]])
        // Both values in one Multiple Handle Value Notification, each to its stream.
        let ra = try await remote.characteristic(uuidC), rb = try await remote.characteristic(BluetoothUUID(0xFFF7))
        let va = try await remote.subscribe(to: ra), vb = try await remote.subscribe(to: rb)
        #expect(try await server.peripheral.notify([(a, [0xA1, 0xA2]), (b, [0xB1])]).count == 1)
        var ia = va.makeAsyncIterator(), ib = vb.makeAsyncIterator()
        #expect(try await ia.next() == [0xA1, 0xA2])
        #expect(try await ib.next() == [0xB1])
        // The link goes: operations waiting for a bearer fail with it, none hangs.
        _ = try await remote.disconnect()
        await #expect(throws: (any Error).self) { _ = try await remote.read(ra) }
    }

    @Test func aServerWithoutEATTSaysSo() async throws {
        let pair = try await Pair()
        defer { Task { await pair.room.close() } }
        await #expect(throws: BLEError.self) { try await pair.remote.openEnhancedBearers() }
        // Nothing changed: the unenhanced bearer still serves.
        #expect(try await pair.remote.discoverServices().isEmpty == false)
    }
}

/// Application code on the host's loop, as TheRuntime.md shows it: an actor on
/// `BluetoothHost.loopExecutor`, in a task that prefers the host's task executor.
private actor LoopSender {
    nonisolated let executor: LoopExecutor
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
    init(_ executor: LoopExecutor) { self.executor = executor }

    func notify(_ peripheral: PeripheralManager, _ c: Characteristic, times: Int) async throws {
        for i in 0..<times { _ = try await peripheral.notify(c, value: [UInt8(truncatingIfNeeded: i)]) }
    }
}

@Suite(.timeLimit(.minutes(3))) struct LoopSenderTests {
    @Test func anActorOnTheHostsExecutorNotifiesWithoutAJobPerCall() async throws {
        // A loop of its own: the count below is of every job on the loop.
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let pair = try await Pair(radio: VirtualRadio(loop: group.next()))
        let host = pair.server
        let c = Characteristic(uuid: uuidC, properties: [.notify], value: [0])
        try await host.peripheral.add(Service(uuid: uuidA, characteristics: [c]))
        let rc = try await pair.remote.characteristic(uuidC, in: uuidA)
        let values = try await pair.remote.subscribe(to: rc)
        let sender = LoopSender(host.loopExecutor)
        let n = 200
        let executor = host.loopExecutor
        let before = try await host.loop.submit { executor.jobsRun }.get()
        try await withTaskExecutorPreference(host.taskExecutor) { try await sender.notify(host.peripheral, c, times: n) }
        let jobs = try await host.loop.submit { executor.jobsRun }.get() - before
        #expect(await collect(values, count: n, within: .seconds(10)).count == n)
        // Each notify is calls from the sender into PeripheralManager and GATTServer and
        // back: no job of their own (what remains is the waits for the controller's
        // buffers, ~64 here). An actor on NIO's `loop.executor` ran four per notify.
        #expect(jobs < n, "\(jobs) jobs for \(n) notifications")
        await pair.room.close()
        try await group.shutdownGracefully()
    }
}

/// A task executor that runs its jobs on a loop of its own and counts them: it stands in
/// for the cooperative pool, so a test can count how often a caller's task comes back
/// to its own executor.
private final class CountingTaskExecutor: TaskExecutor, @unchecked Sendable {
    let loop: any EventLoop
    private let count = Mutex(0)
    var jobs: Int { count.withLock { $0 } }
    init(_ loop: any EventLoop) { self.loop = loop }

    func enqueue(_ job: consuming ExecutorJob) {
        count.withLock { $0 += 1 }
        let job = UnownedJob(job)
        loop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

@Suite(.timeLimit(.minutes(3))) struct CallerHopTests {
    @Test func aReadComesBackToItsCallerOnce() async throws {
        // Loops of their own: one for the stack, one for the caller.
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let loops = Array(group.makeIterator())
        let pair = try await Pair(radio: VirtualRadio(loop: loops[0]))
        let c = Characteristic(uuid: uuidC, properties: [.read, .write], value: [7])
        try await pair.server.peripheral.add(Service(uuid: uuidA, characteristics: [c]))
        let rc = try await pair.remote.characteristic(uuidC, in: uuidA)
        let caller = CountingTaskExecutor(loops[1])
        let n = 50
        let executor = pair.server.loopExecutor
        let loopBefore = try await loops[0].submit { executor.jobsRun }.get()
        let jobs = try await withTaskExecutorPreference(caller) {
            let before = caller.jobs
            for _ in 0..<n {
                #expect(try await pair.remote.read(rc) == [7])
                try await pair.remote.write([7], to: rc)
            }
            return caller.jobs - before
        }
        let loopJobs = try await loops[0].submit { executor.jobsRun }.get() - loopBefore
        let operations = 2 * n
        // Each operation goes to the loop and comes back once: the stack waits for the
        // peer's answer on its loop, not on the caller's executor (there, each answer
        // came back to the caller first and went on to the loop: twice per operation).
        #expect(jobs <= operations + 4, "\(jobs) jobs on the caller's executor for \(operations) operations")
        // Both hosts and both controllers, all on one loop: ~8.5 jobs per operation when
        // the whole facade call prefers the loop, ~15 when only the GATT procedure does,
        // 24 when nothing does.
        #expect(loopJobs < 12 * operations, "\(loopJobs) jobs on the stack's loop for \(operations) operations")
        await pair.room.close()
        try await group.shutdownGracefully()
    }

    @Test func aNotificationComesBackToItsCallerOnce() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let loops = Array(group.makeIterator())
        let pair = try await Pair(radio: VirtualRadio(loop: loops[0]))
        let host = pair.server
        let c = Characteristic(uuid: uuidC, properties: [.notify], value: [0])
        try await host.peripheral.add(Service(uuid: uuidA, characteristics: [c]))
        let rc = try await pair.remote.characteristic(uuidC, in: uuidA)
        let values = try await pair.remote.subscribe(to: rc)
        let caller = CountingTaskExecutor(loops[1])
        let n = 200
        let jobs = try await withTaskExecutorPreference(caller) {
            let before = caller.jobs
            for i in 0..<n { _ = try await host.peripheral.notify(c, value: [UInt8(truncatingIfNeeded: i)]) }
            return caller.jobs - before
        }
        #expect(await collect(values, count: n, within: .seconds(10)).count == n)
        #expect(jobs <= n + 4, "\(jobs) jobs on the caller's executor for \(n) notifications")
        await pair.room.close()
        try await group.shutdownGracefully()
    }
}

@Suite(.timeLimit(.minutes(3))) struct CallbackSubscriptionTests {
    /// What a subscription's callbacks saw.
    final class Seen: Sendable {
        let values: AsyncStream<[UInt8]>, ends: AsyncStream<String>
        private let valuesIn: AsyncStream<[UInt8]>.Continuation, endsIn: AsyncStream<String>.Continuation
        /// Every value came on the host's loop.
        let onLoop = Mutex(true)
        init() {
            (values, valuesIn) = AsyncStream.makeStream()
            (ends, endsIn) = AsyncStream.makeStream()
        }
        func value(_ v: [UInt8], on loop: any EventLoop) {
            onLoop.withLock { $0 = $0 && loop.inEventLoop }
            valuesIn.yield(v)
        }
        func ended(_ e: (any Error)?) { endsIn.yield(e.map { "\($0)" } ?? "unsubscribed") }
    }

    @Test func valuesGoToACallbackOnTheLoopUntilTheSubscriptionEnds() async throws {
        let pair = try await Pair()
        let server = pair.server, loop = pair.remote.host.loop
        let c = Characteristic(uuid: uuidC, properties: [.notify, .indicate], value: [0])
        try await server.peripheral.add(Service(uuid: uuidA, characteristics: [c]))
        let rc = try await pair.remote.characteristic(uuidC, in: uuidA)
        let seen = Seen()
        try await pair.remote.subscribe(to: rc, onValue: { seen.value($0, on: loop) }, ended: { seen.ended($0) })
        for i: UInt8 in 0..<20 { try await server.peripheral.notify(c, value: [i]) }
        #expect(await collect(seen.values, count: 20, within: .seconds(5)) == (0..<20).map { [UInt8($0)] })
        #expect(seen.onLoop.withLock { $0 })
        // Unsubscribing ends it with no error, without waiting for a link end that is
        // not coming (that wait is 1 s).
        try await pair.remote.unsubscribe(from: rc)
        #expect(await firstElement(seen.ends, within: .milliseconds(500)) == "unsubscribed")
        // Indications this time; the link's end ends it with the disconnection.
        let again = Seen()
        try await pair.remote.subscribe(to: rc, indications: true, onValue: { again.value($0, on: loop) }, ended: { again.ended($0) })
        #expect(try await server.peripheral.indicate(c, value: [42]).count == 1)
        #expect(await collect(again.values, count: 1, within: .seconds(5)) == [[42]])
        _ = try await pair.remote.disconnect()
        #expect(await firstElement(again.ends, within: .seconds(5)) == "\(BLEError.disconnected(reason: .connectionTerminatedByLocalHost))")
        await pair.room.close()
    }

    /// A subscription the characteristic's properties do not offer (indications of a
    /// characteristic that only notifies) is refused here, before the CCCD is written:
    /// the server never hears of it. The one it offers goes through.
    @Test func aSubscriptionThePropertiesDoNotOfferIsRefusedBeforeItIsAsked() async throws {
        let pair = try await Pair()
        let server = pair.server
        let c = Characteristic(uuid: uuidC, properties: [.read, .notify], value: [0])
        try await server.peripheral.add(Service(uuid: uuidA, characteristics: [c]))
        let events = server.peripheral.events()
        let rc = try await pair.remote.characteristic(uuidC, in: uuidA)
        await #expect(throws: BLEError.notSupported("\(uuidC) does not indicate (its properties: read,notify)")) {
            _ = try await pair.remote.subscribe(to: rc, indications: true)
        }
        let values = try await pair.remote.subscribe(to: rc)
        // The first the server heard: notifications on.
        let first = await firstElement(events, within: .seconds(5))
        guard case let .subscriptionChanged(changed, _, notify, indicate)? = first else { Issue.record("\(String(describing: first))"); return }
        #expect(changed == c && notify && !indicate)
        _ = values
        await pair.room.close()
    }

    @Test func aBearerClosedUnderTheLinkEndsTheSubscriptionWithItsReason() async throws {
        let pair = try await Pair()
        let c = Characteristic(uuid: uuidC, properties: [.notify], value: [0])
        try await pair.server.peripheral.add(Service(uuid: uuidA, characteristics: [c]))
        let rc = try await pair.remote.characteristic(uuidC, in: uuidA)
        let seen = Seen(), loop = pair.remote.host.loop
        try await pair.remote.subscribe(to: rc, onValue: { seen.value($0, on: loop) }, ended: { seen.ended($0) })
        // What an ATT transaction timeout does to the bearer, with the link still up.
        await pair.remote.client.bearer.close(reason: "closed by the test")
        #expect(await firstElement(seen.ends, within: .seconds(5)) == "\(ATTBearerError.bearerUnusable("closed by the test"))")
        #expect(await pair.room.central.central.connectedPeripherals.count == 1)
        await pair.room.close()
    }
}

extension FacadeTests {
    /// What an application asks of a host whose transport has ended ends at once:
    /// each stream is finished, each operation throws; nothing waits for good.
    @Test func everythingAskedOfAClosedHostEndsAtOnce() async throws {
        let radio = VirtualRadio()
        let c = BluetoothHost(transport: await radio.makeController(address: BluetoothAddress("C0:00:00:00:00:21")!), logger: Bench.logger)
        let p = BluetoothHost(transport: await radio.makeController(address: BluetoothAddress("C0:00:00:00:01:21")!), logger: Bench.logger)
        defer { Task { await p.close(); _ = radio } }
        try await c.start()
        try await p.start()
        let value = Characteristic(uuid: uuidB, properties: [.read, .notify], permissions: [.read], value: [1])
        try await p.peripheral.add(Service(uuid: uuidA, characteristics: [value]))
        try await p.peripheral.startAdvertising(AdvertisingData())
        let remote = try await c.central.connect(to: BluetoothAddress("C0:00:00:00:01:21")!, within: .seconds(5))
        let rc = try await remote.characteristic(uuidB)
        await c.close()
        #expect(await ends(c.states(), within: .seconds(3)))
        #expect(await ends(c.connectionEvents(), within: .seconds(3)))
        #expect(await ends(await c.securityEvents(), within: .seconds(3)))
        #expect(await ends(c.peripheral.events(), within: .seconds(3)))
        #expect(await ends(await c.peripheral.requests(), within: .seconds(3)))
        #expect(await ends(await c.publishChannel(spsm: 0x0080), within: .seconds(3)))
        #expect(await throwsWithin(.seconds(3)) { _ = try await c.central.scan() })
        #expect(await throwsWithin(.seconds(3)) { _ = try await c.central.first(matching: ScanFilter(), within: .seconds(30)) })
        #expect(await throwsWithin(.seconds(3)) { _ = try await c.central.connect(to: BluetoothAddress("C0:00:00:00:01:21")!, within: .seconds(30)) })
        #expect(await throwsWithin(.seconds(3)) { try await c.peripheral.startAdvertising(AdvertisingData()) })
        #expect(await throwsWithin(.seconds(3)) { _ = try await remote.read(rc) })
        #expect(await throwsWithin(.seconds(3)) { _ = try await remote.subscribe(to: rc) })
        #expect(await throwsWithin(.seconds(3)) { _ = try await remote.serviceChanges() })
        #expect(await throwsWithin(.seconds(3)) { _ = try await remote.secure() })
        #expect(await throwsWithin(.seconds(3)) { _ = try await remote.openChannel(spsm: 0x0080) })
        #expect(await throwsWithin(.seconds(3)) { _ = try await remote.readRSSI() })
        #expect(await throwsWithin(.seconds(3)) { _ = try await remote.disconnect() })
        #expect(await remote.disconnection(within: .seconds(3)) != nil)
    }
}

extension FacadeTests {
    /// The same for a link the peer ended: every operation on the peripheral throws at
    /// once, its subscription's stream ends with the reason, and on the peripheral's
    /// side a request handed out for that link is answered into the void, not waited on.
    @Test func everythingAskedOfAnEndedLinkEndsAtOnce() async throws {
        let radio = VirtualRadio()
        let c = BluetoothHost(transport: await radio.makeController(address: BluetoothAddress("C0:00:00:00:00:22")!), logger: Bench.logger)
        let p = BluetoothHost(transport: await radio.makeController(address: BluetoothAddress("C0:00:00:00:01:22")!), logger: Bench.logger)
        defer { Task { await c.close(); await p.close(); _ = radio } }
        try await c.start()
        try await p.start()
        let manual = Characteristic(uuid: uuidA, properties: [.read], permissions: [.read], value: [], answersManually: true)
        let value = Characteristic(uuid: uuidB, properties: [.read, .notify], permissions: [.read], value: [1])
        try await p.peripheral.add(Service(uuid: uuidA, characteristics: [manual, value]))
        let requests = await p.peripheral.requests()
        try await p.peripheral.startAdvertising(AdvertisingData())
        let remote = try await c.central.connect(to: BluetoothAddress("C0:00:00:00:01:22")!, within: .seconds(5))
        let rc = try await remote.characteristic(uuidB)
        let rm = try await remote.characteristic(uuidA)
        let values = try await remote.subscribe(to: rc)
        // A read the peripheral's app holds, unanswered, when the link ends.
        let pending = Task { try await remote.read(rm) }
        var it = requests.makeAsyncIterator()
        let request = try #require(await it.next())
        for link in await p.connections { _ = try await p.disconnect(link) }
        #expect(await throwsWithin(.seconds(3)) { _ = try await pending.value })
        #expect(await throwsWithin(.seconds(3)) { for try await _ in values {} })
        #expect(await remote.disconnection(within: .seconds(3)) != nil)
        #expect(await throwsWithin(.seconds(3)) { _ = try await remote.read(rc) })
        #expect(await throwsWithin(.seconds(3)) { try await remote.write([2], to: rc, withResponse: false) })
        #expect(await throwsWithin(.seconds(3)) { _ = try await remote.subscribe(to: rc) })
        #expect(await throwsWithin(.seconds(3)) { try await remote.unsubscribe(from: rc) })
        #expect(await throwsWithin(.seconds(3)) { _ = try await remote.serviceChanges() })
        #expect(await throwsWithin(.seconds(3)) { _ = try await remote.discoverServices(refresh: true) })
        #expect(await throwsWithin(.seconds(3)) { _ = try await remote.secure() })
        #expect(await throwsWithin(.seconds(3)) { _ = try await remote.openChannel(spsm: 0x0080) })
        #expect(await throwsWithin(.seconds(3)) { _ = try await remote.openEnhancedBearers() })
        #expect(await throwsWithin(.seconds(3)) { _ = try await remote.readRSSI() })
        let answered: Void? = await firstElement(AsyncStream<Void> { k in Task { await request.respond(with: [9]); k.yield() } }, within: .seconds(3))
        #expect(answered != nil)
    }
}
