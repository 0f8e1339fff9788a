// The repeated-attempts back-off (Vol 3, Part H, §2.3.6) on the loop's clock: a central
// whose legacy pairing fails its confirm check is refused (Pairing Failed, Repeated
// Attempts) until 2 s of the loop's time have passed, then let in. The peer is bytes
// injected into a scripted transport; the loop is a testing loop, so its time moves
// only when the test advances it.

import BLETesting
import HCI
import L2CAP
import Logging
import NIOEmbedded
import SMP
import Testing

@Suite(.timeLimit(.minutes(3)))
struct RepeatedAttemptsTests {
    @Test func aFailedPairingIsRefusedAgainUntilTheLoopsClockSaysSo() async throws {
        let t = ScriptedTransport()
        let loop = NIOAsyncTestingEventLoop()
        let controller = HCIController(transport: t, loop: loop, logger: VirtualRadioTests.logger)
        await controller.setACLBufferCount(8)
        let l2cap = L2CAPHost(controller: controller, logger: VirtualRadioTests.logger)
        await l2cap.start()
        let security = SecurityManager(l2cap: l2cap, random: .seeded(3), logger: VirtualRadioTests.logger)
        await security.start()
        var links = await l2cap.linkEvents().makeAsyncIterator()
        t.inject(HCIEvent.le(.connectionComplete(LEConnectionComplete(
            connectionHandle: 0x40, role: .peripheral, peerAddressType: .random, peerAddress: BluetoothAddress("C0:11:22:33:44:55")!))))
        _ = await links.next()

        func smp(_ pdu: [UInt8]) {
            t.inject(.acl(ACLDataPacket(handle: 0x40, boundary: .firstFlushable, data: BasicFrame(channel: .securityManager, payload: pdu).bytes)))
        }
        /// The next SMP PDU our peripheral sends.
        func answer() async -> [UInt8]? {
            var r = Reassembler()
            while let p = await t.nextSent(timeout: .seconds(5)) {
                guard case let .acl(acl) = p, let f = r.receive(acl).frame, f.channel == .securityManager else { continue }
                return f.payload
            }
            return nil
        }
        // Legacy Just Works (no Secure Connections, no input or output), no keys to distribute.
        let request: [UInt8] = [0x01, 0x03, 0x00, 0x01, 0x10, 0x00, 0x00]
        smp(request)
        #expect(await answer()?.first == 0x02)  // Pairing Response
        smp([0x03] + [UInt8](repeating: 0xA5, count: 16))  // a Pairing Confirm no random will match
        #expect(await answer()?.first == 0x03)  // its own Confirm
        smp([0x04] + [UInt8](repeating: 0x5A, count: 16))
        #expect(await answer() == [0x05, 0x04])  // Confirm Value Failed
        // At once again: refused.
        smp(request)
        #expect(await answer() == [0x05, 0x09])
        // 1.9 s later on the loop's clock (the wall clock has hardly moved): still refused.
        await loop.advanceTime(by: .milliseconds(1900))
        smp(request)
        #expect(await answer() == [0x05, 0x09])
        // Past 2 s: let in.
        await loop.advanceTime(by: .milliseconds(200))
        smp(request)
        #expect(await answer()?.first == 0x02)
    }
}
