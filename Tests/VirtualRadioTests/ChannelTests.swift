import BLETesting
import HCI
import L2CAP
import Testing

/// LE credit-based channels between two of our hosts over the virtual radio: the
/// runtime around the byte-level tests in L2CAPTests (Bumble's and the kernel's
/// channels are the interop tests).
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
}
