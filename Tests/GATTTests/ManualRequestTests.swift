// Reads and writes the application answers itself (GATTServer.setManual): Read Blob
// offsets applied by the server, the app's errors passed to the peer, permissions
// checked before the app sees anything, and a silent app timing out as Unlikely Error.

import ATT
import BLETesting
import HCI
import L2CAP
import Logging
import NIOCore
import NIOEmbedded
import Testing
@testable import GATT

struct ManualRequestTests {
    @Test func longReadsAreServedFromTheWholeValueAtEachOffset() async throws {
        let (client, server, _, _, custom) = try await GATTClientTests().setUp(mtu: 23)
        let h = custom.characteristicValues[0]
        await server.setManual([h])
        let value = (0..<50).map { UInt8(200 - $0) }
        let answerer = Task {
            var kinds: [GATTServer.Request.Kind] = []
            for await r in server.requests {
                kinds.append(r.kind)
                if case .read = r.kind { await server.respond(to: r.id, with: .success(value)) } else { await server.respond(to: r.id, with: .failure(ATTErrorCode(rawValue: 0x80))) }
                if kinds.count == 4 { break }
            }
            return kinds
        }
        // ATT_MTU 23: Read gives 22 bytes, Read Blob at 22 and 44 the rest.
        #expect(try await client.read(h) == value)
        await #expect(throws: GATTClientError.att(.errorResponse(request: .writeRequest, handle: h, error: ATTErrorCode(rawValue: 0x80)))) {
            try await client.write(h, value: [1])
        }
        #expect(await answerer.value == [.read(offset: 0), .read(offset: 22), .read(offset: 44), .write(value: [1], withResponse: true)])
        // The stored value was never touched.
        #expect(await server.database.attribute(h)?.value == (0..<200).map { UInt8($0) })
    }

    @Test func permissionsAreCheckedFirstAndSilenceTimesOut() async throws {
        let (client, server, _, battery, _) = try await GATTClientTests().setUp(mtu: 23)
        let level = battery.characteristicValues[0]  // read + notify: not writable
        await server.setManual([level])
        await server.setManualTimeout(.milliseconds(50))
        // Not writable: refused by the server, the app never asked.
        await #expect(throws: GATTClientError.att(.errorResponse(request: .writeRequest, handle: level, error: .writeNotPermitted))) {
            try await client.write(level, value: [1])
        }
        // Nobody answers the read: Unlikely Error, and the bearer stays usable.
        await #expect(throws: GATTClientError.att(.errorResponse(request: .readRequest, handle: level, error: .unlikelyError))) {
            _ = try await client.read(level)
        }
        await server.setManual([])
        #expect(try await client.read(level) == [100])
    }

    /// The wait for the application's answer is the loop's time: on a testing loop, a
    /// Read Request nobody answers gets Unlikely Error when the loop's clock passes the
    /// 20 s default, not before, and with no wall-clock wait.
    @Test func anUnansweredRequestTimesOutOnTheLoopsClock() async throws {
        let logger = Logger(label: "t") { _ in SwiftLogNoOpLogHandler() }
        let t = ScriptedTransport()
        let loop = NIOAsyncTestingEventLoop()
        let c = HCIController(transport: t, loop: loop, logger: logger)
        await c.setACLBufferCount(8)
        let host = L2CAPHost(controller: c, logger: logger)
        await host.start()
        var links = await host.linkEvents().makeAsyncIterator()
        t.inject(HCIEvent.le(.connectionComplete(LEConnectionComplete(connectionHandle: 0x40, role: .peripheral, peerAddressType: .public,
                                                                      peerAddress: BluetoothAddress("11:22:33:44:55:66")!))))
        _ = await links.next()
        var db = AttributeDatabase()
        let s = try db.add(GATTService(uuid: BluetoothUUID(0xFFF0), characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF1), properties: [.read], value: [7]),
        ]))
        let h = s.characteristicValues[0]
        let server = GATTServer(database: db, loop: loop, logger: logger)
        await server.setManual([h])
        await server.attach(ATTBearer(channel: await L2CAPATTChannel(host: host, handle: 0x40), logger: logger), connection: 0x40)
        func acl(_ pdu: [UInt8], _ boundary: ACLPacketBoundary) -> HCIPacket {
            .acl(ACLDataPacket(handle: 0x40, boundary: boundary, data: BasicFrame(channel: .att, payload: pdu).bytes))
        }
        var requests = server.requests.makeAsyncIterator()
        t.inject(acl([0x0A, UInt8(h & 0xFF), UInt8(h >> 8)], .firstFlushable))
        #expect(await requests.next()?.kind == .read(offset: 0))
        await loop.advanceTime(by: .seconds(19))
        #expect(await t.nextSent(timeout: .milliseconds(50)) == nil)
        await loop.advanceTime(by: .seconds(1))
        #expect(await t.nextSent() == acl([0x01, 0x0A, UInt8(h & 0xFF), UInt8(h >> 8), ATTErrorCode.unlikelyError.rawValue], .firstNonFlushable))
    }
}
