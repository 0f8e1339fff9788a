// Notifications under a subscriber that falls behind: the server paces its caller by
// the bearers' writability (bounded queues) and serves every subscriber with room
// before it waits for one without.

import ATT
import HCI
import L2CAP
import Logging
import NIOCore
import NIOPosix
import Synchronization
import Testing
@testable import GATT

@Suite(.timeLimit(.minutes(3)))
struct NotifyPacingTests {
    static let logger = Logger(label: "t") { _ in SwiftLogNoOpLogHandler() }

    /// An ATT channel that records what is written (in one log shared by several
    /// channels) and either hands each PDU to the "link" at once or holds it until
    /// `release()`: a subscriber whose link takes nothing.
    final class RecordingChannel: ATTChannel {
        let loop: any EventLoop
        let name: String
        let holds: Bool
        private let held = Mutex<[@Sendable (Bool) -> Void]>([])
        private let shared: SharedLog

        final class SharedLog: Sendable {
            let entries = Mutex<[String]>([])
            /// Each entry as it is written, for a test to wait on.
            let written = AsyncStream<String>.makeStream()
        }

        init(loop: any EventLoop, name: String, holds: Bool, log: SharedLog) {
            self.loop = loop
            self.name = name
            self.holds = holds
                self.shared = log
        }

        func open(_ deliver: @escaping @Sendable (ATTChannelInput) -> Void) {}

        func write(_ pdu: [UInt8], done: (@Sendable (Bool) -> Void)?) -> Bool {
            // Held before the test can see the write: a `release()` the test makes as soon
            // as it sees it must find it (else it stays held, and a wait for room never ends).
            if holds { held.withLock { $0.append(done ?? { _ in }) } }
            shared.entries.withLock { $0.append("\(name) \(pdu)") }
            shared.written.continuation.yield("\(name) \(pdu)")
            if !holds { done?(true) }
            return true
        }

        /// Hands every held PDU to the link (on the loop, where the bearer expects it).
        func release() {
            let all = held.withLock { h in defer { h.removeAll() }; return h }
            loop.execute { for d in all { d(true) } }
        }

        var closeReason: String { "\(name) closed" }
    }

    /// A server on a shared loop with one notifiable characteristic: its value handle,
    /// its CCCD and a log for the channels the test attaches.
    static func oneNotifiableCharacteristic() throws
        -> (any EventLoop, GATTServer, value: UInt16, cccd: UInt16, RecordingChannel.SharedLog) {
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        var db = AttributeDatabase()
        let s = try db.add(GATTService(uuid: BluetoothUUID(0xFFF0), characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF1), properties: [.read, .notify], value: [0]),
        ]))
        let cccd = try #require(s.clientConfigurations[0])
        return (loop, GATTServer(database: db, loop: loop, logger: logger), s.characteristicValues[0], cccd, RecordingChannel.SharedLog())
    }

    @Test func aSubscriberWithoutRoomGetsItsNotificationAfterTheOthers() async throws {
        let (loop, server, value, cccd, log) = try Self.oneNotifiableCharacteristic()
        let slow = RecordingChannel(loop: loop, name: "slow", holds: true, log: log)
        let fast = RecordingChannel(loop: loop, name: "fast", holds: false, log: log)
        // 7-octet notifications; the slow bearer is not writable from 8 octets on.
        await server.attach(ATTBearer(channel: slow, highWaterMark: 8, logger: Self.logger), connection: 0x40)
        await server.attach(ATTBearer(channel: fast, highWaterMark: 8, logger: Self.logger), connection: 0x41)
        for c: UInt16 in [0x40, 0x41] { await server.restoreClientConfigurations([cccd: 1], connection: c) }

        let note: (UInt8) -> String = { "\([0x1B, UInt8(value & 0xFF), UInt8(value >> 8), 1, 2, 3, $0])" }
        // The first goes to both (the slow one now holds 7 octets: still writable).
        #expect(await server.notify(value, value: [1, 2, 3, 1]) == [0x40, 0x41])
        #expect(await server.notify(value, value: [1, 2, 3, 2]) == [0x40, 0x41])
        // 14 octets held: the third waits for the slow subscriber, the fast one has it first.
        let third = Task { await server.notify(value, value: [1, 2, 3, 3]) }
        var written = log.written.stream.makeAsyncIterator()
        while let entry = await written.next(), entry != "fast \(note(3))" {}
        #expect(!log.entries.withLock { $0.contains("slow \(note(3))") })
        slow.release()
        #expect(await third.value == [0x40, 0x41])
        #expect(log.entries.withLock { $0 } == [
            "slow \(note(1))", "fast \(note(1))", "slow \(note(2))", "fast \(note(2))", "fast \(note(3))", "slow \(note(3))",
        ])
    }

    /// `notify(multiple:)` hands each PDU over at once while the bearer has room and
    /// waits for room before the rest: nothing is dropped, the order holds.
    @Test func severalValuesWaitForRoomInOrder() async throws {
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        var db = AttributeDatabase()
        let s = try db.add(GATTService(uuid: BluetoothUUID(0xFFF0), characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF1), properties: [.read, .notify], value: [0]),
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF2), properties: [.read, .notify], value: [0]),
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF3), properties: [.read, .notify], value: [0]),
        ]))
        let server = GATTServer(database: db, loop: loop, logger: Self.logger)
        let log = RecordingChannel.SharedLog()
        let slow = RecordingChannel(loop: loop, name: "slow", holds: true, log: log)
        await server.attach(ATTBearer(channel: slow, highWaterMark: 8, logger: Self.logger), connection: 0x40)
        var configurations: [UInt16: UInt16] = [:]
        for c in s.clientConfigurations { configurations[try #require(c)] = 1 }
        await server.restoreClientConfigurations(configurations, connection: 0x40)
        let handles = s.characteristicValues
        let note: (Int) -> String = { i in "slow \([0x1B, UInt8(handles[i] & 0xFF), UInt8(handles[i] >> 8), 1, 2, 3, UInt8(i)])" }
        // 7 octets each: two go at once (7, then 14 held: no longer writable), the third waits.
        let all = Task { await server.notify(multiple: (0..<3).map { (handles[$0], [1, 2, 3, UInt8($0)]) }) }
        var written = log.written.stream.makeAsyncIterator()
        while let entry = await written.next(), entry != note(1) {}
        #expect(log.entries.withLock { $0 } == [note(0), note(1)])
        slow.release()
        #expect(await all.value == [0x40])
        #expect(log.entries.withLock { $0 } == [note(0), note(1), note(2)])
    }

    /// With `waitUntilSent`, `notify` returns once each bearer has handed its PDUs to
    /// the link, not while the link still holds one (the server waits on the bearer's
    /// own loop, with no hop to it).
    @Test func waitUntilSentReturnsOnceTheLinkHasTheNotification() async throws {
        let (loop, server, value, cccd, log) = try Self.oneNotifiableCharacteristic()
        let slow = RecordingChannel(loop: loop, name: "slow", holds: true, log: log)
        await server.attach(ATTBearer(channel: slow, highWaterMark: 64, logger: Self.logger), connection: 0x40)
        await server.restoreClientConfigurations([cccd: 1], connection: 0x40)
        let returned = Flag()
        let notifying = Task { await Self.notify(value, on: server, thenSet: returned) }
        var written = log.written.stream.makeAsyncIterator()
        _ = await written.next()
        // Two turns of the loop: the job that wrote the PDU has ended, and anything it
        // resumed has run.
        for _ in 0..<2 { try await loop.submit {}.get() }
        #expect(!returned.isSet, "notify returned while the link still held the notification")
        slow.release()
        #expect(await notifying.value == [0x40])
        #expect(returned.isSet)
    }

    final class Flag: Sendable {
        private let value = Mutex(false)
        var isSet: Bool { value.withLock { $0 } }
        func set() { value.withLock { $0 = true } }
    }

    /// Isolated to the server: `flag` is set on the loop as soon as notify returns.
    static func notify(_ handle: UInt16, on server: isolated GATTServer, thenSet flag: Flag) async -> [UInt16] {
        let sent = await server.notify(handle, value: [1, 2, 3], waitUntilSent: true)
        flag.set()
        return sent
    }
}
