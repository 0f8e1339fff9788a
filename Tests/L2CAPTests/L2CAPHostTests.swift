import BLETesting
import HCI
import Logging
import NIOCore
import NIOEmbedded
import Testing
@testable import L2CAP

@Suite(.timeLimit(.minutes(3)))
struct L2CAPHostTests {
    static let logger = Logger(label: "t") { _ in SwiftLogNoOpLogHandler() }
    static let peer = BluetoothAddress("C0:11:22:33:44:55")!

    func setUp(credits: Int = 8) async -> (L2CAPHost, HCIController, ScriptedTransport) {
        let t = ScriptedTransport()
        let c = HCIController(transport: t, logger: Self.logger)
        await c.setACLBufferCount(credits)
        let host = L2CAPHost(controller: c, logger: Self.logger)
        await host.start()
        return (host, c, t)
    }

    func connect(_ t: ScriptedTransport, _ host: L2CAPHost, handle: UInt16, role: ConnectionRole = .central) async {
        var links = await host.linkEvents().makeAsyncIterator()
        t.inject(HCIEvent.le(.connectionComplete(LEConnectionComplete(connectionHandle: handle, role: role, peerAddressType: .random, peerAddress: Self.peer))))
        _ = await links.next()  // the connection is known to L2CAP before this event
    }

    @Test func inboundFragmentsReachTheChannelSubscriber() async throws {
        let (host, _, t) = await setUp()
        let att = await host.frames(on: .att)
        await connect(t, host, handle: 0x40)
        let frame = BasicFrame(channel: .att, payload: Array(0..<40))
        for f in frame.fragments(handle: 0x40, maximumDataLength: 27) {
            t.inject(.acl(ACLDataPacket(handle: f.handle, boundary: f.boundary == .firstNonFlushable ? .firstFlushable : f.boundary, data: f.data)))
        }
        var it = att.makeAsyncIterator()
        #expect(await it.next() == ChannelFrame(handle: 0x40, payload: Array(0..<40)))
    }

    /// A controller that reports a connection already up again (a firmware bug) does
    /// not reset the link: no second `.connected` reaches the layers above, the link's
    /// credit-based channels stay, and its frames keep coming. (Before, the link was
    /// rebuilt under its users: the seeded lying-controller test saw reads hang.)
    @Test func aSecondConnectionCompleteForALinkThatIsUpIsIgnored() async throws {
        let (host, _, t) = await setUp()
        let att = await host.frames(on: .att)
        var links = await host.linkEvents().makeAsyncIterator()
        let complete = HCIEvent.le(.connectionComplete(LEConnectionComplete(connectionHandle: 0x40, role: .peripheral, peerAddressType: .random, peerAddress: Self.peer)))
        t.inject(complete)
        // With its parameters, as LE Connection Complete gave them.
        guard case .connected(_, 0x28, 0, 0x1F4)? = await links.next() else { Issue.record("no link"); return }
        // A channel on the link, opened by the peer.
        let channels = await host.listen(spsm: 0x0080, parameters: CreditBasedParameters(), security: .none, backlog: 4)
        t.inject(.acl(ACLDataPacket(handle: 0x40, boundary: .firstFlushable, data: BasicFrame(channel: .leSignaling, payload:
            [0x14, 0x01, 0x0A, 0x00, 0x80, 0x00, 0x40, 0x00, 0x17, 0x00, 0x17, 0x00, 0x01, 0x00]).bytes)))
        var opened = channels.makeAsyncIterator()
        let channel = try #require(await opened.next())
        // The same connection, reported again (the enhanced event too), then the link's data.
        t.inject(complete)
        t.inject(HCIEvent.le(.enhancedConnectionComplete(LEEnhancedConnectionComplete(connectionHandle: 0x40, role: .central, peerAddressType: .random, peerAddress: Self.peer))))
        t.inject(.acl(ACLDataPacket(handle: 0x40, boundary: .firstFlushable, data: BasicFrame(channel: .att, payload: [0x0A, 0x03, 0x00]).bytes)))
        var it = att.makeAsyncIterator()
        #expect(await it.next() == ChannelFrame(handle: 0x40, payload: [0x0A, 0x03, 0x00]))
        let stillOpen = await channel.closeReason == nil
        #expect(stillOpen)
        // The next link event is the real end, not a second start (nor its parameters).
        t.inject(HCIEvent.disconnectionComplete(DisconnectionComplete(connectionHandle: 0x40, reason: .remoteUserTerminatedConnection)))
        guard case .disconnected? = await links.next() else { Issue.record("a second link start reached the layers above"); return }
    }

    @Test func outboundFramesAreFragmentedAndConnectionsTakeTurns() async throws {
        let (host, c, t) = await setUp(credits: 0)
        await connect(t, host, handle: 1)
        await connect(t, host, handle: 2)
        // No controller buffers yet: everything queues. 5 fragments for 1, one for 2.
        let sentOne = AsyncStream<Bool>.makeStream(), sentTwo = AsyncStream<Bool>.makeStream()
        #expect(await host.enqueue([UInt8](repeating: 0xAA, count: 27 * 5 - 4), on: .att, handle: 1, done: { sentOne.continuation.yield($0) }))
        #expect(await host.enqueue([0xBB], on: .att, handle: 2, done: { sentTwo.continuation.yield($0) }))
        await c.setACLBufferCount(8)
        var sent: [ACLDataPacket] = []
        for _ in 0..<6 {
            guard case let .acl(p)? = await t.nextSent() else { Issue.record("expected ACL"); return }
            sent.append(p)
        }
        var one = sentOne.stream.makeAsyncIterator(), two = sentTwo.stream.makeAsyncIterator()
        #expect(await one.next() == true)
        #expect(await two.next() == true)
        #expect(sent.allSatisfy { $0.data.count <= 27 })
        let first = sent.filter { $0.handle == 1 }
        #expect(first.count == 5)
        #expect(first.first?.boundary == .firstNonFlushable && first.dropFirst().allSatisfy { $0.boundary == .continuing })
        // Fair: connection 2's frame does not wait behind all of connection 1's.
        let index2 = try #require(sent.firstIndex { $0.handle == 2 })
        #expect(index2 <= 2)
        var r = Reassembler()
        var frames: [BasicFrame] = []
        for p in sent { if let f = r.receive(p).frame { frames.append(f) } }
        #expect(frames.contains(BasicFrame(channel: .att, payload: [UInt8](repeating: 0xAA, count: 27 * 5 - 4))))
    }

    /// Peripheral: a Connection Parameter Update Request ends with the central's
    /// answer (accepted, refused, Command Reject), with the RTX timeout of the loop's
    /// time when none comes (a late answer then changes nothing), or with the link.
    @Test func parameterUpdateRequestsEndWithTheAnswerTheRTXOrTheLink() async throws {
        let t = ScriptedTransport()
        let loop = NIOAsyncTestingEventLoop()
        let c = HCIController(transport: t, loop: loop, logger: Self.logger)
        await c.setACLBufferCount(8)
        let host = L2CAPHost(controller: c, logger: Self.logger)
        await host.start()
        await connect(t, host, handle: 0x40, role: .peripheral)
        let params = ConnectionParameterUpdate(intervalMin: 0x18, intervalMax: 0x28, latency: 0, timeout: 0x190)
        /// Starts a request and returns it with the identifier it went out with.
        func request() async throws -> (Task<Bool, any Error>, UInt8) {
            let r = Task { try await host.requestParameterUpdate(params, handle: 0x40) }
            var reassembler = Reassembler()
            guard case let .acl(p)? = await t.nextSent(), let f = reassembler.receive(p).frame, f.channel == .leSignaling,
                  f.payload.count == 12, f.payload[0] == 0x12, Array(f.payload[4...]) == params.bytes else {
                Issue.record("no Connection Parameter Update Request")
                throw CancellationError()
            }
            return (r, f.payload[1])
        }
        func inject(_ signal: [UInt8]) {
            t.inject(.acl(ACLDataPacket(handle: 0x40, boundary: .firstFlushable, data: BasicFrame(channel: .leSignaling, payload: signal).bytes)))
        }
        var (r, id) = try await request()
        inject([0x13, id, 0x02, 0x00, 0x00, 0x00])
        #expect(try await r.value == true)
        (r, id) = try await request()
        inject([0x13, id, 0x02, 0x00, 0x01, 0x00])
        #expect(try await r.value == false)
        (r, id) = try await request()
        inject([0x01, id, 0x02, 0x00, 0x00, 0x00])  // Command Not Understood
        #expect(try await r.value == false)
        // No answer: 30 s of the loop's time, not a moment less.
        (r, id) = try await request()
        await loop.advanceTime(by: .seconds(29))
        let early = Task { try await host.requestParameterUpdate(params, handle: 0x40, within: .seconds(60)) }
        _ = await t.nextSent()  // the second request is out; the first still waits
        await loop.advanceTime(by: .seconds(1))
        await #expect(throws: L2CAPChannelError.timedOut) { try await r.value }
        inject([0x13, id, 0x02, 0x00, 0x00, 0x00])  // too late: ignored, nothing answers it
        #expect(await t.nextSent(timeout: .milliseconds(50)) == nil)
        // The link ends under the other one.
        t.inject(HCIEvent.disconnectionComplete(DisconnectionComplete(connectionHandle: 0x40, reason: .remoteUserTerminatedConnection)))
        await #expect(throws: HCIError.connectionClosed(handle: 0x40)) { try await early.value }
    }

    /// A peer that keeps sending what draws an answer while taking nothing (here: no
    /// controller buffers ever free) fills its link's queue: past `outboundLimit` the
    /// link ends with Low Resources (0x14) and what was queued fails, instead of the
    /// queue growing without bound or anything vanishing unreported.
    @Test func aLinkWhoseQueuePassesTheLimitIsDisconnectedForLowResources() async throws {
        let t = ScriptedTransport()
        let c = HCIController(transport: t, logger: Self.logger)
        await c.setACLBufferCount(0)
        let host = L2CAPHost(controller: c, outboundLimit: 60, logger: Self.logger)
        await host.start()
        await connect(t, host, handle: 0x40)
        await connect(t, host, handle: 0x41)
        let first = AsyncStream<Bool>.makeStream()
        #expect(await host.enqueue([0x1B, 0x03, 0x00, 0x01], on: .att, handle: 0x40, done: { first.continuation.yield($0) }))
        #expect(await host.enqueue([0x1B, 0x03, 0x00, 0x01], on: .att, handle: 0x41))
        // Each Pairing Request (no Security Manager here) draws Pairing Failed: 6 octets of ACL data.
        let pairingRequest = BasicFrame(channel: .securityManager, payload: [0x01, 0x03, 0x00, 0x01, 0x10, 0x07, 0x07]).bytes
        for n in 1...9 {
            t.inject(.acl(ACLDataPacket(handle: 0x40, boundary: .firstFlushable, data: pairingRequest)))
            if n == 8 {
                await connect(t, host, handle: 0x42)  // delivered in order: the eight came first
                #expect(await host.queuedOctets(handle: 0x40) == 8 + 8 * 6)
                #expect(await host.linksEndedForLowResources == 0)
            }
        }
        // The ninth answer passes 60 octets.
        try await t.expect(Disconnect(connectionHandle: 0x40, reason: .remoteDeviceTerminatedConnectionDueToLowResources).packet)
        var it = first.stream.makeAsyncIterator()
        #expect(await it.next() == false)
        #expect(await host.linksEndedForLowResources == 1)
        #expect(await host.queuedOctets(handle: 0x40) == 0)
        #expect(await !host.enqueue([0x52], on: .att, handle: 0x40))
        // The other link keeps its queue and its place.
        #expect(await host.queuedOctets(handle: 0x41) == 8)
        #expect(await host.enqueue([0x52], on: .att, handle: 0x41))
    }

    @Test func centralAnswersParameterUpdateAndUpdatesTheConnection() async throws {
        let (host, _, t) = await setUp()
        await connect(t, host, handle: 0x40, role: .central)
        let request: [UInt8] = [0x12, 0x07, 0x08, 0x00, 0x18, 0x00, 0x28, 0x00, 0x00, 0x00, 0x90, 0x01]
        t.inject(.acl(ACLDataPacket(handle: 0x40, boundary: .firstFlushable, data: BasicFrame(channel: .leSignaling, payload: request).bytes)))
        var got: [HCIPacket] = []
        for _ in 0..<2 { if let p = await t.nextSent() { got.append(p) } }
        let response = HCIPacket.acl(ACLDataPacket(handle: 0x40, boundary: .firstNonFlushable,
                                                   data: BasicFrame(channel: .leSignaling, payload: [0x13, 0x07, 0x02, 0x00, 0x00, 0x00]).bytes))
        let update = LEConnectionUpdate(connectionHandle: 0x40, connection: LEConnectionParameters(
            connectionIntervalMin: 0x18, connectionIntervalMax: 0x28, maxLatency: 0, supervisionTimeout: 0x190)).packet
        #expect(got.contains(response))
        #expect(got.contains(update))
    }

    @Test func disconnectionDropsTheConnection() async throws {
        let (host, _, t) = await setUp()
        await connect(t, host, handle: 5)
        var links = await host.linkEvents().makeAsyncIterator()
        t.inject(HCIEvent.disconnectionComplete(DisconnectionComplete(connectionHandle: 5, reason: .remoteUserTerminatedConnection)))
        _ = await links.next()  // the connection is gone from L2CAP before this event
        await #expect(throws: HCIError.connectionClosed(handle: 5)) { try await host.send([1], on: .att, handle: 5) }
    }

    // Ordering: events and ACL data reach L2CAP in the order the controller sent them.

    @Test func theFirstATTPDUInTheSameReadAsItsConnectionIsKept() async throws {
        let (host, _, t) = await setUp()
        var links = await host.linkEvents().makeAsyncIterator()
        // LE Connection Complete and the central's Exchange MTU Request back to back.
        t.inject(HCIEvent.le(.connectionComplete(LEConnectionComplete(connectionHandle: 0x40, role: .peripheral, peerAddressType: .random, peerAddress: Self.peer))))
        t.inject(.acl(ACLDataPacket(handle: 0x40, boundary: .firstFlushable, data: BasicFrame(channel: .att, payload: [0x02, 0x00, 0x02]).bytes)))
        guard case .connected? = await links.next() else { Issue.record("no connection"); return }
        var frames = await host.frames(on: .att, handle: 0x40).makeAsyncIterator()
        #expect(await frames.next() == [0x02, 0x00, 0x02])
    }

    @Test func theLastACLBeforeDisconnectionCompleteIsDelivered() async throws {
        let (host, _, t) = await setUp()
        await connect(t, host, handle: 0x40)
        let stream = await host.frames(on: .att, handle: 0x40)
        for i: UInt8 in 0..<50 {
            t.inject(.acl(ACLDataPacket(handle: 0x40, boundary: .firstFlushable, data: BasicFrame(channel: .att, payload: [0x1B, 0x03, 0x00, i]).bytes)))
        }
        t.inject(HCIEvent.disconnectionComplete(DisconnectionComplete(connectionHandle: 0x40, reason: .remoteUserTerminatedConnection)))
        var got: [[UInt8]] = []
        for await f in stream { got.append(f) }
        #expect(got == (0..<50).map { [0x1B, 0x03, 0x00, $0] })
    }

    /// Once the transport has ended, every stream asked of L2CAP is finished at once
    /// and a close observer is called at once: a layer that subscribes late (a facade
    /// started on a controller that just went away) never waits for good.
    @Test func streamsAskedForAfterTheTransportEndedAreFinished() async throws {
        let (host, _, t) = await setUp()
        await connect(t, host, handle: 0x40)
        let before = await host.linkEvents()
        await t.close()
        var seen: [L2CAPHost.LinkEvent] = []
        for await e in before { seen.append(e) }  // finishes with the transport
        #expect(seen.isEmpty)
        #expect(await ends(await host.linkEvents(), within: .seconds(3)))
        #expect(await ends(await host.newConnections(), within: .seconds(3)))
        #expect(await ends(await host.frames(on: .att), within: .seconds(3)))
        #expect(await ends(await host.frames(on: .att, handle: 0x40), within: .seconds(3)))
        #expect(await ends(await host.listen(spsm: 0x0080), within: .seconds(3)))
        let called: Void? = await firstElement(AsyncStream<Void> { k in Task { await host.addCloseObserver { k.yield() } } }, within: .seconds(3))
        #expect(called != nil)
    }
}
