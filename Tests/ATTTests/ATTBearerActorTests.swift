import BLETesting
import HCI
import L2CAP
import Logging
import NIOCore
import NIOEmbedded
import Synchronization
import Testing
@testable import ATT

@Suite(.timeLimit(.minutes(3)))
struct ATTBearerActorTests {
    static let logger = Logger(label: "t") { _ in SwiftLogNoOpLogHandler() }

    /// A controller on the scripted transport with one LE connection (handle 0x40) and
    /// an ATT bearer on it.
    /// The whole stack runs on a testing loop: its time moves only when a test advances it.
    func setUp(buffers: Int = 8, highWaterMark: Int = ATTBearer.defaultHighWaterMark) async -> (ATTBearer, ScriptedTransport, NIOAsyncTestingEventLoop) {
        let t = ScriptedTransport()
        let loop = NIOAsyncTestingEventLoop()
        let c = HCIController(transport: t, loop: loop, logger: Self.logger)
        await c.setACLBufferCount(buffers)
        let host = L2CAPHost(controller: c, logger: Self.logger)
        await host.start()
        var links = await host.linkEvents().makeAsyncIterator()
        t.inject(HCIEvent.le(.connectionComplete(LEConnectionComplete(connectionHandle: 0x40, role: .central, peerAddressType: .public, peerAddress: BluetoothAddress("11:22:33:44:55:66")!))))
        _ = await links.next()  // the connection is known to L2CAP before this event
        let bearer = ATTBearer(channel: L2CAPATTChannel(host: host, handle: 0x40), highWaterMark: highWaterMark, logger: Self.logger)
        await bearer.start()
        return (bearer, t, loop)
    }

    static func acl(_ pdu: [UInt8], boundary: ACLPacketBoundary = .firstFlushable) -> HCIPacket {
        .acl(ACLDataPacket(handle: 0x40, boundary: boundary, data: BasicFrame(channel: .att, payload: pdu).bytes))
    }

    @Test func requestGoesOutAsACLAndTheResponseComesBack() async throws {
        let (bearer, t, _) = await setUp()
        let read = Task { try await bearer.request(.readRequest(handle: 3)) }
        #expect(await t.nextSent() == Self.acl([0x0A, 0x03, 0x00], boundary: .firstNonFlushable))
        t.inject(Self.acl([0x0B, 0x64]))
        #expect(try await read.value == .readResponse(value: [0x64]))
    }

    /// Writability: notifications the link has not taken count against the high-water
    /// mark; a sender waits in `writable()` until the controller's completions bring
    /// them back under the low-water mark, then goes on.
    @Test func notificationsPastTheHighWaterMarkWaitForTheLink() async throws {
        let (bearer, t, _) = await setUp(buffers: 1, highWaterMark: 14)
        let pdu = ATTPDU.handleValueNotification(handle: 3, value: [1, 2, 3, 4])  // 7 octets
        try await bearer.sendUnacknowledged(pdu)  // the one controller buffer takes it
        #expect(await bearer.isWritable)
        try await bearer.sendUnacknowledged(pdu)  // 7 waiting
        #expect(await bearer.isWritable)
        try await bearer.sendUnacknowledged(pdu)  // 14 waiting: not writable
        #expect(await !bearer.isWritable)
        let fourth = Task { try await bearer.sendWhenWritable(.handleValueNotification(handle: 3, value: [9])) }
        #expect(await t.nextSent() == Self.acl(pdu.bytes, boundary: .firstNonFlushable))
        #expect(await t.nextSent(timeout: .milliseconds(50)) == nil)
        // The fourth waits in the bearer, not in the link: two frames of 11 octets queued.
        let host = try #require(bearer.channel as? L2CAPATTChannel).host
        #expect(await host.queuedOctets(handle: 0x40) == 22)
        // One buffer back: the second goes, 7 octets wait (the low-water mark): writable.
        t.inject(HCIEvent.numberOfCompletedPackets(NumberOfCompletedPackets(entries: [.init(connectionHandle: 0x40, numCompletedPackets: 1)])))
        #expect(await t.nextSent() == Self.acl(pdu.bytes, boundary: .firstNonFlushable))
        try await fourth.value
        for _ in 0..<2 {
            #expect(await t.nextSent(timeout: .milliseconds(50)) == nil)
            t.inject(HCIEvent.numberOfCompletedPackets(NumberOfCompletedPackets(entries: [.init(connectionHandle: 0x40, numCompletedPackets: 1)])))
            _ = await t.nextSent()
        }
        #expect(await bearer.isDrained)
    }

    /// A sender waiting for room hears the link's end instead of waiting for ever.
    @Test func aWriterWaitingForRoomIsReleasedWhenTheLinkEnds() async throws {
        let (bearer, t, _) = await setUp(buffers: 0, highWaterMark: 7)
        try await bearer.sendUnacknowledged(.writeCommand(handle: 3, value: [1, 2, 3, 4]))
        let waiting = Task { try await bearer.sendWhenWritable(.writeCommand(handle: 3, value: [5])) }
        t.inject(HCIEvent.disconnectionComplete(DisconnectionComplete(connectionHandle: 0x40, reason: .remoteUserTerminatedConnection)))
        await #expect(throws: ATTBearerError.bearerUnusable("connection 0x0040 closed")) { try await waiting.value }
    }

    /// `queuedRequestsSent(within:)`: with three requests started and none answered,
    /// the first is out and two wait; the call returns once the last has gone (two
    /// answers later), at once when nothing waits, and at its limit when the peer is
    /// silent.
    @Test func queuedRequestsSentWaitsForTheLastToGo() async throws {
        let (bearer, t, loop) = await setUp()
        for h in UInt16(1)...3 { await bearer.startRequest(.writeRequest(handle: h, value: [0, 0])) { _ in } }
        #expect(await t.nextSent() == Self.acl([0x12, 0x01, 0x00, 0x00, 0x00], boundary: .firstNonFlushable))
        let sent = Task { await bearer.queuedRequestsSent(within: .seconds(2)) }
        t.inject(Self.acl([0x13]))
        #expect(await t.nextSent() == Self.acl([0x12, 0x02, 0x00, 0x00, 0x00], boundary: .firstNonFlushable))
        await loop.advanceTime(by: .seconds(1))
        t.inject(Self.acl([0x13]))
        #expect(await t.nextSent() == Self.acl([0x12, 0x03, 0x00, 0x00, 0x00], boundary: .firstNonFlushable))
        await sent.value  // the third is out (its answer is not waited for)
        await bearer.queuedRequestsSent(within: .seconds(2))  // nothing waits: at once

        // A silent peer: the wait ends at its limit (the loop's time), the request still
        // queued. The waiting task may start before the first second or well after it
        // (on a loaded machine it started after ten: its limit then never came, and the
        // test waited for ever), so the loop's time goes on until it ends.
        await bearer.startRequest(.writeRequest(handle: 4, value: [0, 0])) { _ in }
        let done = Mutex(false)
        let limited = Task {
            await bearer.queuedRequestsSent(within: .seconds(2))
            done.withLock { $0 = true }
        }
        var seconds = 0
        while !done.withLock({ $0 }), seconds < 10_000 {
            await loop.advanceTime(by: .seconds(1))
            seconds += 1
        }
        guard done.withLock({ $0 }) else {
            Issue.record("the wait did not end within 10,000 s of the loop's time")
            return
        }
        await limited.value
        #expect(seconds >= 2, "not before its limit")
        #expect(await t.nextSent(timeout: .milliseconds(50)) == nil)
    }

    @Test func mtuExchangeSetsTheMTU() async throws {
        let (bearer, t, _) = await setUp()
        let mtu = Task { try await bearer.exchangeMTU() }
        #expect(await t.nextSent() == Self.acl([0x02, 0x05, 0x02], boundary: .firstNonFlushable))
        t.inject(Self.acl([0x03, 0x40, 0x00]))
        #expect(try await mtu.value == 64)
        #expect(await bearer.mtu == 64)
    }

    @Test func thirtySecondsWithoutAnswerMakesTheBearerUnusable() async throws {
        let (bearer, t, loop) = await setUp()
        let read = Task { try await bearer.request(.readRequest(handle: 3)) }
        _ = await t.nextSent()
        await loop.advanceTime(by: .seconds(29))
        #expect(await bearer.isOpen)
        await loop.advanceTime(by: .seconds(1))
        await #expect(throws: ATTBearerError.transactionTimeout(.readRequest)) { try await read.value }
        await #expect(throws: ATTBearerError.self) { try await bearer.request(.readRequest(handle: 4)) }
        #expect(await t.nextSent(timeout: .milliseconds(50)) == nil)
    }

    @Test func incomingRequestIsAnsweredAndIndicationConfirmed() async throws {
        let (bearer, t, _) = await setUp()
        var incoming = bearer.incoming.makeAsyncIterator()
        t.inject(Self.acl([0x0A, 0x05, 0x00]))
        #expect(await incoming.next() == .request(.readRequest(handle: 5)))
        await bearer.respond(.errorResponse(request: .readRequest, handle: 5, error: .readNotPermitted))
        #expect(await t.nextSent() == Self.acl([0x01, 0x0A, 0x05, 0x00, 0x02], boundary: .firstNonFlushable))
        t.inject(Self.acl([0x1D, 0x05, 0x00, 0x09]))
        #expect(await incoming.next() == .indication(handle: 5, value: [9]))
        await bearer.confirm()
        #expect(await t.nextSent() == Self.acl([0x1E], boundary: .firstNonFlushable))
    }

    @Test func disconnectionFailsPendingRequestsAndEndsIncoming() async throws {
        let (bearer, t, _) = await setUp()
        let read = Task { try await bearer.request(.readRequest(handle: 3)) }
        _ = await t.nextSent()
        t.inject(HCIEvent.disconnectionComplete(DisconnectionComplete(connectionHandle: 0x40, reason: .remoteUserTerminatedConnection)))
        await #expect(throws: ATTBearerError.bearerUnusable("connection 0x0040 closed")) { try await read.value }
        var n = 0
        for await _ in bearer.incoming { n += 1 }
        #expect(n == 0)
    }
}
