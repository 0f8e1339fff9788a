// PeripheralManager.notificationWriter: values sent from a plain task reach the
// subscribed central in order, every one; `send` suspends while the queue is full
// and goes on once the loop has taken it down; a writer whose characteristic went, or
// whose host's transport ended, fails with that error, counting what it dropped.

@testable import BLE
import BLETesting
import Foundation
import GATT
import L2CAP
import NIOPosix
import Synchronization
import Testing

@Suite(.timeLimit(.minutes(3))) struct NotificationWriterTests {
    /// What a callback subscription received, in order (on the central's loop).
    final class Received: Sendable {
        private struct State {
            var values: [[UInt8]] = []
            /// `wait(for:)`'s count and who to tell when it is reached.
            var waiting: (count: Int, reached: AsyncStream<Void>.Continuation)?
        }
        private let state = Mutex(State())
        var values: [[UInt8]] { state.withLock { $0.values } }

        func take(_ v: [UInt8]) {
            let reached = state.withLock { s -> AsyncStream<Void>.Continuation? in
                s.values.append(v)
                guard let w = s.waiting, s.values.count >= w.count else { return nil }
                s.waiting = nil
                return w.reached
            }
            reached?.yield()
        }

        /// Returns once `n` values came, or false after `limit`.
        func wait(for n: Int, within limit: Duration = .seconds(10)) async -> Bool {
            let (reached, tell) = AsyncStream<Void>.makeStream()
            let now = state.withLock { s -> Bool in
                guard s.values.count < n else { return true }
                s.waiting = (n, tell)
                return false
            }
            if now { return true }
            return await firstElement(reached, within: limit) != nil
        }
    }

    /// A count shared with a task (a flag: 0 or 1).
    final class Count: Sendable {
        private let n = Mutex(0)
        var value: Int { n.withLock { $0 } }
        func add() { n.withLock { $0 += 1 } }
    }

    /// Whether `task` ends within `limit` (the caller cancels it when it did not).
    static func ends(_ task: Task<Void, any Error>, within limit: Duration = .seconds(10)) async -> Bool {
        let (ended, tell) = AsyncStream<Void>.makeStream()
        Task {
            _ = await task.result
            tell.yield()
        }
        return await firstElement(ended, within: limit) != nil
    }

    /// Whether a sender waits for room in `writer`'s queue within 10 s (the queue tells
    /// each change of their count).
    static func aSenderWaits(_ writer: NotificationWriter) async -> Bool {
        await firstElement(writer.queue.waitingSenderCounts().filter { $0 > 0 }, within: .seconds(10)) != nil
    }

    static func subscribed(_ pair: Pair, _ c: Characteristic) async throws -> Received {
        let rc = try await pair.remote.characteristic(uuidC, in: uuidA)
        let received = Received()
        try await pair.remote.subscribe(to: rc, onValue: { received.take($0) })
        return received
    }

    @Test func everyValueFromAPlainTaskArrivesInOrder() async throws {
        let pair = try await Pair()
        let c = Characteristic(uuid: uuidC, properties: [.read, .notify], value: [0, 0])
        try await pair.server.peripheral.add(Service(uuid: uuidA, characteristics: [c]))
        let received = try await Self.subscribed(pair, c)
        let writer = try await pair.server.peripheral.notificationWriter(for: c, capacity: 8)
        let values = (0..<600).map { [UInt8($0 & 0xFF), UInt8($0 >> 8)] }
        // Off the loop, from the cooperative pool, as an application's task.
        let sender = Task.detached { for v in values { try await writer.send(v) } }
        // Bounded: a sender never given room would wait for ever (cancelling ends it).
        #expect(await Self.ends(sender))
        sender.cancel()
        try await writer.flush()
        #expect(writer.sent == values.count && writer.dropped == 0)
        #expect(await received.wait(for: values.count))
        #expect(received.values == values)
        // Each value was stored, as `notify` stores it: reads return the last.
        #expect(try await pair.server.peripheral.value(of: c) == values.last)
        await pair.room.close()
    }

    @Test func aFullQueueHoldsTheSenderUntilTheLoopTakesItDown() async throws {
        // A loop of its own, held busy while the writer fills: nothing is taken.
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let pair = try await Pair(radio: VirtualRadio(loop: group.next()))
        let c = Characteristic(uuid: uuidC, properties: [.notify], value: [0])
        try await pair.server.peripheral.add(Service(uuid: uuidA, characteristics: [c]))
        let received = try await Self.subscribed(pair, c)
        let writer = try await pair.server.peripheral.notificationWriter(for: c, capacity: 4)
        let release = Count()
        pair.server.loop.execute { while release.value == 0 { usleep(1000) } }
        let returned = Count()
        let sender = Task.detached {
            for i in 0..<10 {
                try await writer.send([UInt8(i)])
                returned.add()
            }
        }
        // The fourth value fills the queue: its send waits for room.
        #expect(await Self.aSenderWaits(writer))
        #expect(writer.queue.waitingSenders == 1)
        #expect(writer.queue.queued == 4 && returned.value == 3)
        release.add()
        #expect(await Self.ends(sender))
        sender.cancel()
        try await writer.flush()
        #expect(await received.wait(for: 10))
        #expect(received.values == (0..<10).map { [UInt8($0)] })
        #expect(writer.queue.queued == 0 && writer.queue.waitingSenders == 0)
        await pair.room.close()
        try await group.shutdownGracefully()
    }

    @Test func aWriterWhoseCharacteristicWentFails() async throws {
        let pair = try await Pair()
        let c = Characteristic(uuid: uuidC, properties: [.notify], value: [0])
        let service = Service(uuid: uuidA, characteristics: [c])
        try await pair.server.peripheral.add(service)
        let writer = try await pair.server.peripheral.notificationWriter(for: c)
        try await writer.send([1])
        try await writer.flush()
        try await pair.server.peripheral.remove(service)
        try await writer.send([2])
        await #expect(throws: BLEError.notPublished("characteristic \(uuidC)")) { try await writer.flush() }
        await #expect(throws: BLEError.notPublished("characteristic \(uuidC)")) { try await writer.send([3]) }
        #expect(writer.sent == 1 && writer.dropped == 1)
        // Not published: no writer.
        await #expect(throws: BLEError.notPublished("characteristic \(uuidC)")) {
            _ = try await pair.server.peripheral.notificationWriter(for: c)
        }
        await pair.room.close()
    }

    @Test func theTransportsEndFailsTheWriterAndItsWaitingSender() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let pair = try await Pair(radio: VirtualRadio(loop: group.next()))
        let c = Characteristic(uuid: uuidC, properties: [.notify], value: [0])
        try await pair.server.peripheral.add(Service(uuid: uuidA, characteristics: [c]))
        let writer = try await pair.server.peripheral.notificationWriter(for: c, capacity: 2)
        // The loop busy: the second value fills the queue and its sender waits.
        let release = Count()
        pair.server.loop.execute { while release.value == 0 { usleep(1000) } }
        let sender = Task.detached {
            try await writer.send([1])
            try await writer.send([2])
        }
        #expect(await Self.aSenderWaits(writer))
        #expect(writer.queue.waitingSenders == 1)
        release.add()
        // The close may come before the loop takes the queue, or after: either way the
        // sender and later calls end, and every value was sent or counted as dropped.
        await pair.server.close()
        #expect(await Self.ends(sender))
        sender.cancel()
        await #expect(throws: BLEError.self) { try await writer.send([3]) }
        await #expect(throws: BLEError.self) { try await writer.flush() }
        #expect(writer.sent + writer.dropped == 2)
        await #expect(throws: BLEError.self) { _ = try await pair.server.peripheral.notificationWriter(for: c) }
        await pair.room.central.close()
        try await group.shutdownGracefully()
    }

    /// A notification waiting for the controller's buffers ends when its link does:
    /// `notify` returns without that central. The peripheral's controller holds its 8
    /// buffers, so the 9th notification waits in L2CAP's queue; then the central's
    /// controller leaves the radio.
    @Test func aNotificationWaitingForBuffersEndsWithItsLink() async throws {
        let pair = try await Pair()
        let c = Characteristic(uuid: uuidC, properties: [.notify], value: [0])
        try await pair.server.peripheral.add(Service(uuid: uuidA, characteristics: [c]))
        _ = try await Self.subscribed(pair, c)
        let peripheral = pair.server.peripheral
        let link = try #require(await pair.server.connections.first)
        await pair.room.peripheralControllers[0].holdACL()
        for i in 0..<8 { #expect(try await peripheral.notify(c, value: [UInt8(i)]) == [link]) }
        let ninth = Task { try await peripheral.notify(c, value: [8]) }
        #expect(await WriteWithoutResponseWriterTests.queued(pair.server.l2cap, link.handle, moreThan: 0))
        await pair.room.radio.remove(pair.room.centralController)
        let checked = Task<Void, any Error> {
            let notified = try await ninth.value
            #expect(notified == [])
        }
        #expect(await Self.ends(checked), "notify still waits after its link ended")
        await pair.room.close()
    }

    @Test func aCapacityBelowOneIsRefused() async throws {
        let pair = try await Pair()
        let c = Characteristic(uuid: uuidC, properties: [.notify], value: [0])
        try await pair.server.peripheral.add(Service(uuid: uuidA, characteristics: [c]))
        await #expect(throws: BLEError.invalidArgument("capacity must be at least 1, not 0")) {
            _ = try await pair.server.peripheral.notificationWriter(for: c, capacity: 0)
        }
        await pair.room.close()
    }
}

@Suite(.timeLimit(.minutes(3))) struct WriteWithoutResponseWriterTests {
    static func published(_ pair: Pair, properties: CharacteristicProperties = [.writeWithoutResponse]) async throws -> (Characteristic, RemoteCharacteristic) {
        let c = Characteristic(uuid: uuidC, properties: properties, permissions: [.write], value: [0])
        try await pair.server.peripheral.add(Service(uuid: uuidA, characteristics: [c]))
        return (c, try await pair.remote.characteristic(uuidC, in: uuidA))
    }

    @Test func everyValueFromAPlainTaskIsWrittenInOrder() async throws {
        let pair = try await Pair()
        let (c, rc) = try await Self.published(pair)
        let events = pair.server.peripheral.events()
        let writer = try await pair.remote.writeWithoutResponseWriter(for: rc, capacity: 8)
        #expect(writer.maximumLength == 514)  // ATT_MTU 517, both hosts' default
        let values = (0..<200).map { [UInt8($0), 0xA5] }
        let sender = Task.detached { for v in values { try await writer.send(v) } }
        #expect(await NotificationWriterTests.ends(sender))
        sender.cancel()
        try await writer.flush()
        #expect(writer.sent == values.count && writer.dropped == 0)
        let written = await collect(events, count: values.count, within: .seconds(10)).compactMap { e -> [UInt8]? in
            if case let .written(w, value, _) = e, w === c { return value }
            return nil
        }
        #expect(written == values)
        await pair.room.close()
    }

    @Test func whatAWriteCommandCannotCarryIsRefused() async throws {
        let pair = try await Pair()
        let (_, rc) = try await Self.published(pair)
        let writer = try await pair.remote.writeWithoutResponseWriter(for: rc)
        await #expect(throws: BLEError.invalidArgument("a Write Command carries at most 514 bytes (ATT_MTU - 3), not 515")) {
            try await writer.send([UInt8](repeating: 1, count: 515))
        }
        try await writer.flush()
        #expect(writer.sent == 0 && writer.dropped == 0)
        let readOnly = RemoteCharacteristic(uuid: uuidC, properties: [.read], declarationHandle: rc.declarationHandle,
                                            valueHandle: rc.valueHandle, endHandle: rc.endHandle)
        await #expect(throws: BLEError.notSupported("\(uuidC) does not take Write Commands (its properties: read)")) {
            _ = try await pair.remote.writeWithoutResponseWriter(for: readOnly)
        }
        await #expect(throws: BLEError.invalidArgument("capacity must be at least 1, not 0")) {
            _ = try await pair.remote.writeWithoutResponseWriter(for: rc, capacity: 0)
        }
        await pair.room.close()
    }

    @Test func aWriterWhoseLinkEndedFailsWithTheLinksEnd() async throws {
        let pair = try await Pair()
        let (_, rc) = try await Self.published(pair)
        let writer = try await pair.remote.writeWithoutResponseWriter(for: rc)
        try await writer.send([1])
        try await writer.flush()
        _ = try await pair.remote.disconnect()
        try await writer.send([2])
        await #expect(throws: BLEError.disconnected(reason: .connectionTerminatedByLocalHost)) { try await writer.flush() }
        await #expect(throws: BLEError.disconnected(reason: .connectionTerminatedByLocalHost)) { try await writer.send([3]) }
        #expect(writer.sent == 1 && writer.dropped == 1)
        await #expect(throws: BLEError.disconnected(reason: .connectionTerminatedByLocalHost)) {
            _ = try await pair.remote.writeWithoutResponseWriter(for: rc)
        }
        await pair.room.close()
    }
    /// Write Commands waiting for the controller's buffers when their link ends throw
    /// the link's end, from `write(_:to:withResponse: false)` and from a writer's
    /// `flush` alike. The central's controller holds what its host sends, so its 8
    /// buffers fill and the next Write Commands wait in L2CAP's queue; then the
    /// peripheral's controller leaves the radio, and the central's reports Connection
    /// Timeout (0x08).
    @Test func writeCommandsWaitingForBuffersThrowTheLinksEnd() async throws {
        let pair = try await Pair()
        let (_, rc) = try await Self.published(pair)
        let writer = try await pair.remote.writeWithoutResponseWriter(for: rc)
        let l2cap = pair.room.central.l2cap, handle = pair.remote.connection.handle
        await pair.room.centralController.holdACL()
        let writes = Task { for i in 0..<9 { try await pair.remote.write([UInt8(i)], to: rc, withResponse: false) } }
        // Polled: nothing tells when a packet waits for buffers.
        #expect(await Self.queued(l2cap, handle, moreThan: 0))
        let one = await l2cap.queuedOctets(handle: handle)
        try await writer.send([9])
        let flushed = Task { try await writer.flush() }
        #expect(await Self.queued(l2cap, handle, moreThan: one))
        await pair.room.radio.remove(pair.room.peripheralControllers[0])
        await #expect(throws: BLEError.disconnected(reason: .connectionTimeout)) { try await writes.value }
        await #expect(throws: BLEError.disconnected(reason: .connectionTimeout)) { try await flushed.value }
        #expect(writer.dropped == 0)
        await pair.room.close()
    }

    /// Back-pressure, not loss: while the central's controller holds its 8 buffers, the
    /// Write Commands after them wait in L2CAP's queue and `write` does not return;
    /// once the controller lets go, every one reaches the peripheral, in order.
    @Test func writeCommandsWaitForTheControllersBuffersAndAllArrive() async throws {
        let pair = try await Pair()
        let (c, rc) = try await Self.published(pair)
        let events = pair.server.peripheral.events()
        let l2cap = pair.room.central.l2cap, handle = pair.remote.connection.handle
        await pair.room.centralController.holdACL()
        let values = (0..<20).map { [UInt8($0)] }
        let writes = Task { for v in values { try await pair.remote.write(v, to: rc, withResponse: false) } }
        #expect(await Self.queued(l2cap, handle, moreThan: 0))
        await pair.room.centralController.releaseACL()
        try await writes.value
        let written = await collect(events, count: values.count, within: .seconds(10)).compactMap { e -> [UInt8]? in
            if case let .written(w, value, _) = e, w === c { return value }
            return nil
        }
        #expect(written == values)
        await pair.room.close()
    }

    /// Whether more than `octets` wait in `handle`'s L2CAP queue within 10 s.
    static func queued(_ l2cap: L2CAPHost, _ handle: UInt16, moreThan octets: Int) async -> Bool {
        await firstElement(l2cap.queuedOctetCounts(handle: handle).filter { $0 > octets }, within: .seconds(10)) != nil
    }
}
