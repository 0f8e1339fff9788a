import BLETesting
import HCI
import L2CAP
import Testing

/// LE credit-based channels between two of our hosts over the virtual radio: the
/// runtime around the byte-level tests in L2CAPTests (Bumble's and the kernel's
/// channels are the interop tests).
@Suite(.timeLimit(.minutes(3)))
struct ChannelTests {
    /// Two connected L2CAP hosts: `a` peripheral, `b` central.
    static func link(_ radio: VirtualRadio) async throws -> (a: L2CAPHost, b: L2CAPHost, aHandle: UInt16, bHandle: UInt16) {
        let (ha, hb, _, _) = try await VirtualRadioTests.setUp(radio)
        let la = L2CAPHost(controller: ha, logger: VirtualRadioTests.logger), lb = L2CAPHost(controller: hb, logger: VirtualRadioTests.logger)
        await la.start(); await lb.start()
        let incoming = await la.newConnections(), outgoing = await lb.newConnections()
        try await ha.send(LESetAdvertisingEnable(advertisingEnable: true))
        try await hb.send(LECreateConnection(peerAddressType: .public, peerAddress: VirtualRadioTests.a))
        var ia = incoming.makeAsyncIterator(), ib = outgoing.makeAsyncIterator()
        let pc = try #require(await ia.next()), cc = try #require(await ib.next())
        return (la, lb, pc.handle, cc.handle)
    }

    @Test func sdusBothWaysWithCreditsRefilledAsConsumed() async throws {
        let radio = VirtualRadio()  // the controllers hold it weakly
        let (a, b, _, bHandle) = try await Self.link(radio)
        // One credit each way and a small MPS: every SDU needs credits given back.
        let tight = CreditBasedParameters(mtu: 300, mps: 23, initialCredits: 1)
        let accepted = await a.listen(spsm: 0x80, parameters: tight)
        let ours = try await b.connectChannel(spsm: 0x80, handle: bHandle, parameters: tight)
        var it = accepted.makeAsyncIterator()
        let theirs = try #require(await it.next())
        #expect(ours.info.remote == tight && theirs.info.remoteCID == ours.info.localCID)
        let sdus = (0..<20).map { n in (0..<(n * 15)).map { UInt8(($0 + n) & 0xFF) } }  // 0...285 bytes
        async let sent: Void = { for s in sdus { try await ours.send(s) } }()
        var got: [[UInt8]] = []
        for try await s in theirs.sdus {
            got.append(s)
            if got.count == sdus.count { break }
        }
        try await sent
        #expect(got == sdus)
        // And back.
        try await theirs.send([1, 2, 3])
        var back = ours.sdus.makeAsyncIterator()
        #expect(try await back.next() == [1, 2, 3])
        // Too long for the peer's MTU: refused before anything is sent.
        await #expect(throws: L2CAPChannelError.sduTooLong(301, mtu: 300)) { try await ours.send(Array(repeating: 0, count: 301)) }
        // Closing ends the peer's sequence cleanly, and our sends fail.
        await ours.close()
        var rest = theirs.sdus.makeAsyncIterator()
        #expect(try await rest.next() == nil)
        #expect(await theirs.closeReason == .closedByPeer)
        await #expect(throws: L2CAPChannelError.self) { try await ours.send([1]) }
    }

    /// A listener whose stream nobody holds any more stops listening: the next peer is
    /// refused with "SPSM not supported", as if nobody had listened, not accepted and
    /// left with no one to read. A newer `listen` on the SPSM is not undone by the
    /// older stream's end.
    @Test func aListenerNobodyHoldsStopsListening() async throws {
        let radio = VirtualRadio()
        let (a, b, _, bHandle) = try await Self.link(radio)
        _ = await a.listen(spsm: 0x82)
        await #expect(throws: L2CAPChannelError.refused(.spsmNotSupported)) {
            _ = try await b.connectChannel(spsm: 0x82, handle: bHandle)
        }
        // Consumed, then its task cancelled.
        let listening = await a.listen(spsm: 0x82)
        let consumer = Task { for await _ in listening {} }
        _ = try await b.connectChannel(spsm: 0x82, handle: bHandle)
        consumer.cancel()
        await consumer.value
        await #expect(throws: L2CAPChannelError.refused(.spsmNotSupported)) {
            _ = try await b.connectChannel(spsm: 0x82, handle: bHandle)
        }
        // Replaced: the first stream's end leaves the second listening.
        let first = await a.listen(spsm: 0x82), second = await a.listen(spsm: 0x82)
        var ended = first.makeAsyncIterator()
        #expect(await ended.next() == nil)
        _ = try await b.connectChannel(spsm: 0x82, handle: bHandle)
        var it = second.makeAsyncIterator()
        #expect(await it.next() != nil)
    }

    /// A channel beyond the listener's backlog (nobody took the ones before it) is
    /// closed at once and counted, not left open with no one to read it.
    @Test func aChannelBeyondTheBacklogIsClosed() async throws {
        let radio = VirtualRadio()
        let (a, b, _, bHandle) = try await Self.link(radio)
        let accepted = await a.listen(spsm: 0x84, backlog: 1)
        let kept = try await b.connectChannel(spsm: 0x84, handle: bHandle)
        let beyond = try await b.connectChannel(spsm: 0x84, handle: bHandle)
        // Ends (nil) when the peer closes it; bounded, should it stay open.
        _ = await firstElement(beyond.sdus, within: .seconds(5), on: b.loop)
        #expect(await beyond.closeReason == .closedByPeer)
        #expect(accepted.dropped.count == 1)
        var it = accepted.makeAsyncIterator()
        #expect(await it.next()?.info.remoteCID == kept.info.localCID)
        #expect(await kept.closeReason == nil)
    }

    /// A reader waiting for an SDU whose task is cancelled stops waiting; the channel
    /// stays open, and the next SDU goes to the next reader.
    @Test func cancellingAReaderEndsItsWait() async throws {
        let radio = VirtualRadio()
        let (a, b, _, bHandle) = try await Self.link(radio)
        let accepted = await a.listen(spsm: 0x83)
        let ours = try await b.connectChannel(spsm: 0x83, handle: bHandle)
        var it = accepted.makeAsyncIterator()
        let theirs = try #require(await it.next())
        let reader = Task {
            var sdus = theirs.sdus.makeAsyncIterator()
            return try await sdus.next()
        }
        reader.cancel()
        // Bounded: a wait that ignored the cancellation would hold the test until an SDU came.
        let ended = AsyncStream<Bool> { c in
            Task {
                do { _ = try await reader.value; c.yield(false) } catch { c.yield(error is CancellationError) }
                c.finish()
            }
        }
        #expect(await firstElement(ended, within: .seconds(5), on: b.loop) == true)
        try await ours.send([7])
        var again = theirs.sdus.makeAsyncIterator()
        #expect(try await again.next() == [7])
    }

    @Test func refusedAndLostChannelsEndWithTheirReason() async throws {
        let radio = VirtualRadio()
        let (a, b, _, bHandle) = try await Self.link(radio)
        await #expect(throws: L2CAPChannelError.refused(.spsmNotSupported)) {
            _ = try await b.connectChannel(spsm: 0x81, handle: bHandle)
        }
        let accepted = await a.listen(spsm: 0x81)
        let ours = try await b.connectChannel(spsm: 0x81, handle: bHandle)
        var it = accepted.makeAsyncIterator()
        let theirs = try #require(await it.next())
        // The link goes down: both ends' sequences throw with the controller's reason.
        try await b.controller.send(Disconnect(connectionHandle: bHandle, reason: .remoteUserTerminatedConnection))
        await #expect(throws: L2CAPChannelError.closed(.linkLost(.connectionTerminatedByLocalHost))) {
            for try await _ in ours.sdus {}
        }
        await #expect(throws: L2CAPChannelError.closed(.linkLost(.remoteUserTerminatedConnection))) {
            for try await _ in theirs.sdus {}
        }
        await #expect(throws: L2CAPChannelError.linkClosed(handle: bHandle)) {
            _ = try await b.connectChannel(spsm: 0x81, handle: bHandle)
        }
    }

    @Test func enhancedModeOpensSeveralChannelsAtOnceAndReconfigures() async throws {
        let radio = VirtualRadio()
        let (a, b, _, bHandle) = try await Self.link(radio)
        let accepted = await a.listen(spsm: 0x90, parameters: CreditBasedParameters(mtu: 100, mps: 64, initialCredits: 2))
        // One Credit Based Connection Request for three channels.
        let ours = try await b.connectChannels(spsm: 0x90, count: 3, handle: bHandle, parameters: CreditBasedParameters(mtu: 80, mps: 64, initialCredits: 1))
        var it = accepted.makeAsyncIterator()
        var theirs: [L2CAPChannel] = []
        for _ in 0..<3 { theirs.append(try #require(await it.next())) }
        #expect(ours.count == 3 && ours.allSatisfy(\.info.enhanced) && theirs.allSatisfy(\.info.enhanced))
        #expect(ours.map(\.info.localCID) == theirs.map(\.info.remoteCID))
        // Each channel carries its own SDUs (one credit, MPS 64: several K-frames each).
        for (i, ch) in ours.enumerated() { try await ch.send(Array(repeating: UInt8(i), count: 100)) }
        for (i, ch) in theirs.enumerated() {
            var sdus = ch.sdus.makeAsyncIterator()
            #expect(try await sdus.next() == Array(repeating: UInt8(i), count: 100))
        }
        // 100 bytes is the peer's MTU; it raises it to 300 on two channels at once.
        await #expect(throws: L2CAPChannelError.sduTooLong(101, mtu: 100)) { try await ours[0].send(Array(repeating: 0, count: 101)) }
        try await a.reconfigure([theirs[0], theirs[1]], mtu: 300, mps: 64)
        #expect(theirs[0].info.local.mtu == 300 && ours[0].info.remote.mtu == 300 && ours[2].info.remote.mtu == 100)
        try await ours[0].send(Array(repeating: 9, count: 300))
        var first = theirs[0].sdus.makeAsyncIterator()
        #expect(try await first.next() == Array(repeating: 9, count: 300))
        // The MTU may not shrink: refused before anything is sent.
        await #expect(throws: L2CAPChannelError.reconfigureRefused(.mtuReductionNotAllowed)) { try await theirs[1].reconfigure(mtu: 200, mps: 64) }
        // An LE-mode channel is not reconfigurable.
        let le = try await b.connectChannel(spsm: 0x90, handle: bHandle)
        await #expect(throws: L2CAPChannelError.reconfigureRefused(.invalidDestinationCIDs)) { try await le.reconfigure(mtu: 600, mps: 100) }
        // A refused SPSM refuses every channel of the request.
        await #expect(throws: L2CAPChannelError.refused(.spsmNotSupported)) {
            _ = try await b.connectChannels(spsm: 0x91, count: 2, handle: bHandle)
        }
    }
}
