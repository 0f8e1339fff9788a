// The server side under a hostile client, through the whole pipeline: HCI packets
// are injected into a scripted transport and the host's HCI packets checked, so the
// controller, L2CAP (signaling, SMP, unknown CIDs), the ATT bearer and the GATT
// server all take part. Each case gets the answer the Core Specification gives it
// (Vol 3 Part F §3.2.8, §3.4.7; Part A §4; Part H §3.5.5).

import ATT
import BLETesting
import HCI
import L2CAP
import Logging
import Testing
@testable import GATT

@Suite(.timeLimit(.minutes(3)))
struct HostileClientTests {
    static let logger = Logger(label: "t") { _ in SwiftLogNoOpLogHandler() }

    struct Pipeline {
        var transport: ScriptedTransport
        var host: L2CAPHost
        var server: GATTServer
        var indicateHandle: UInt16
        var cccd: UInt16

        func inject(_ channel: ChannelID, _ payload: [UInt8], handle: UInt16) {
            transport.inject(.acl(ACLDataPacket(handle: handle, boundary: .firstFlushable, data: BasicFrame(channel: channel, payload: payload).bytes)))
        }

        /// The next frame the host sends (reassembled from its ACL fragments); nil after `timeout`.
        func nextFrame(timeout: Duration = .seconds(5)) async -> (handle: UInt16, channel: ChannelID, payload: [UInt8])? {
            var r = Reassembler()
            while let p = await transport.nextSent(timeout: timeout) {
                guard case let .acl(acl) = p else { continue }
                if let f = r.receive(acl).frame { return (acl.handle, f.channel, f.payload) }
            }
            return nil
        }
    }

    /// A server with one indicate characteristic, on links `handles` (as peripheral).
    func pipeline(handles: [UInt16]) async throws -> Pipeline {
        let t = ScriptedTransport()
        let c = HCIController(transport: t, logger: Self.logger)
        await c.setACLBufferCount(16)
        let host = L2CAPHost(controller: c, logger: Self.logger)
        await host.start()
        var db = AttributeDatabase()
        let s = try db.add(GATTService(uuid: BluetoothUUID(0xFFF0), characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF1), properties: [.read, .write, .indicate], permissions: .readWrite, value: [1]),
        ]))
        let server = GATTServer(database: db, loop: c.loop, logger: Self.logger)
        var links = await host.linkEvents().makeAsyncIterator()
        for h in handles {
            t.inject(HCIEvent.le(.connectionComplete(LEConnectionComplete(
                connectionHandle: h, role: .peripheral, peerAddressType: .random, peerAddress: BluetoothAddress("C0:11:22:33:44:55")!))))
            // The link's start.
            while let e = await links.next() {
                if case let .connected(c, _, _, _) = e, c.handle == h { break }
            }
            await server.attach(ATTBearer(channel: L2CAPATTChannel(host: host, handle: h), logger: Self.logger), connection: h)
        }
        return Pipeline(transport: t, host: host, server: server, indicateHandle: s.characteristicValues[0], cccd: try #require(s.clientConfigurations[0]))
    }

    @Test func prepareWriteLongerThanTheMTUGetsInvalidPDU() async throws {
        let p = try await pipeline(handles: [0x40])
        let h = p.indicateHandle
        // 5 + 30 bytes on a bearer whose ATT_MTU is 23.
        p.inject(.att, [0x16, UInt8(h & 0xFF), UInt8(h >> 8), 0, 0] + Array(repeating: 0xAB, count: 30), handle: 0x40)
        let f = try #require(await p.nextFrame())
        #expect(f.channel == .att)
        #expect(f.payload == [0x01, 0x16, 0x00, 0x00, 0x04])
    }

    @Test func theClientsIndicationIsConfirmed() async throws {
        let p = try await pipeline(handles: [0x40])
        p.inject(.att, [0x1D, 0x03, 0x00, 0x01], handle: 0x40)
        let f = try #require(await p.nextFrame())
        #expect(f.payload == [0x1E])
    }

    @Test func aCentralThatNeverConfirmsDelaysNoOther() async throws {
        let p = try await pipeline(handles: [0x40, 0x41])
        for link: UInt16 in [0x40, 0x41] {
            p.inject(.att, [0x12, UInt8(p.cccd & 0xFF), UInt8(p.cccd >> 8), 0x02, 0x00], handle: link)
            #expect(await p.nextFrame()?.payload == [0x13])
        }
        let server = p.server, h = p.indicateHandle
        let done = Task { await server.indicate(h, value: [9]) }
        // Both indications leave before anyone confirms.
        let first = try #require(await p.nextFrame()), second = try #require(await p.nextFrame())
        #expect(Set([first.handle, second.handle]) == [0x40, 0x41])
        #expect(first.payload == [0x1D, UInt8(h & 0xFF), UInt8(h >> 8), 9] && second.payload == first.payload)
        // Only 0x41 confirms; 0x40 stays silent (its own bearer times out in 30 s, the test does not wait).
        p.inject(.att, [0x1E], handle: 0x41)
        p.inject(.att, [0x1E], handle: 0x40)
        #expect(await done.value == [0x40, 0x41])
    }

    @Test func disconnectionRequestForAnUnknownCIDIsRejectedInvalidCID() async throws {
        let p = try await pipeline(handles: [0x40])
        p.inject(.leSignaling, [0x06, 0x07, 0x04, 0x00, 0x40, 0x00, 0x41, 0x00], handle: 0x40)
        let f = try #require(await p.nextFrame())
        #expect(f.channel == .leSignaling)
        #expect(f.payload == [0x01, 0x07, 0x06, 0x00, 0x02, 0x00, 0x40, 0x00, 0x41, 0x00])
    }

    @Test func creditBasedConnectionRequestsGetSPSMNotSupported() async throws {
        let p = try await pipeline(handles: [0x40])
        // LE Credit Based Connection Request: SPSM 0x0080, SCID 0x0040, MTU 23, MPS 23, 1 credit.
        p.inject(.leSignaling, [0x14, 0x02, 0x0A, 0x00, 0x80, 0x00, 0x40, 0x00, 0x17, 0x00, 0x17, 0x00, 0x01, 0x00], handle: 0x40)
        #expect(await p.nextFrame()?.payload == [0x15, 0x02, 0x0A, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x00])
        // Credit Based Connection Request for two channels: one Destination CID 0 each.
        p.inject(.leSignaling, [0x17, 0x03, 0x0C, 0x00, 0x80, 0x00, 0x40, 0x00, 0x40, 0x00, 0x01, 0x00, 0x40, 0x00, 0x41, 0x00], handle: 0x40)
        #expect(await p.nextFrame()?.payload == [0x18, 0x03, 0x0C, 0x00, 0, 0, 0, 0, 0, 0, 0x02, 0x00, 0, 0, 0, 0])
    }

    @Test func pairingGetsPairingNotSupported() async throws {
        let p = try await pipeline(handles: [0x40])
        p.inject(.securityManager, [0x01, 0x03, 0x00, 0x01, 0x10, 0x07, 0x07], handle: 0x40)
        let f = try #require(await p.nextFrame())
        #expect(f.channel == .securityManager)
        #expect(f.payload == [0x05, 0x05])
        // A Pairing Failed is never answered.
        p.inject(.securityManager, [0x05, 0x08], handle: 0x40)
        p.inject(.att, [0x1D, 0x03, 0x00, 0x01], handle: 0x40)
        #expect(await p.nextFrame()?.payload == [0x1E])
    }

    @Test func framesForUnknownChannelsAreDiscardedAndCounted() async throws {
        let p = try await pipeline(handles: [0x40])
        for cid: UInt16 in [0x0003, 0x0040, 0x0077] { p.inject(ChannelID(rawValue: cid), [1, 2, 3], handle: 0x40) }
        // Something answered after them proves they were handled (in order) without an answer.
        p.inject(.att, [0x1D, 0x03, 0x00, 0x01], handle: 0x40)
        #expect(await p.nextFrame()?.payload == [0x1E])
        #expect(await p.host.discardedFrames == 3)
    }
}
