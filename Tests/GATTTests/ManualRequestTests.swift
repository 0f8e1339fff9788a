// Reads and writes the application answers itself (GATTServer.setManual): Read Blob
// offsets applied by the server, the app's errors passed to the peer, permissions
// checked before the app sees anything, and a silent app timing out as Unlikely Error;
// long and reliable writes, Read By Type and Read Multiple reach the app as well.

import ATT
import BLETesting
import HCI
import L2CAP
import Logging
import NIOCore
import NIOEmbedded
import Synchronization
import Testing
@testable import GATT

@Suite(.timeLimit(.minutes(3)))
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

    /// A long write (prepared writes, then Execute Write) to a manual value reaches the
    /// application once, whole, when the client executes it; its refusal is the client's
    /// error, naming Execute Write; the stored value is never touched. In a reliable
    /// write, a stored value is written only once the application has accepted its own.
    @Test func longAndReliableWritesReachTheApplicationWhole() async throws {
        let (client, server, _, _, custom) = try await GATTClientTests().setUp(mtu: 23)
        let h = custom.characteristicValues[0], other = custom.characteristicValues[2]
        await server.setManual([h])
        let long = (0..<60).map { UInt8($0) }
        // The first write accepted, the others refused with an application error.
        let asked = Answerer(server) { n in n == 1 ? .success([]) : .failure(ATTErrorCode(rawValue: 0x80)) }
        defer { asked.stop() }
        try await client.write(h, value: long)
        await #expect(throws: GATTClientError.att(.errorResponse(request: .executeWriteRequest, handle: h, error: ATTErrorCode(rawValue: 0x80)))) {
            try await client.write(h, value: Array(long.reversed()))
        }
        await #expect(throws: GATTClientError.att(.errorResponse(request: .executeWriteRequest, handle: h, error: ATTErrorCode(rawValue: 0x80)))) {
            try await client.reliableWrite([(other, [9, 9]), (h, [1, 2])])
        }
        #expect(asked.kinds == [.write(value: long, withResponse: true), .write(value: Array(long.reversed()), withResponse: true),
                                .write(value: [1, 2], withResponse: true)])
        #expect(await server.database.attribute(h)?.value == (0..<200).map { UInt8($0) })
        // Refused as a whole: the stored value beside it is as it was.
        #expect(await server.database.attribute(other)?.value == [])
        // Without manual values in the queue, the server executes it alone as before.
        try await client.reliableWrite([(other, [9, 9])])
        #expect(await server.database.attribute(other)?.value == [9, 9])
    }

    /// Read By Type, Read Multiple and Read Multiple Variable read a manual value from
    /// the application as a Read Request does; its refusal answers the request.
    @Test func readByTypeAndReadMultipleAskTheApplication() async throws {
        let (client, server, _, battery, custom) = try await GATTClientTests().setUp(mtu: 23)
        let h = custom.characteristicValues[0], level = battery.characteristicValues[0]
        await server.setManual([h])
        let asked = Answerer(server) { n in n < 4 ? .success([0xA0, 0xA1, UInt8(n)]) : .failure(.readNotPermitted) }
        defer { asked.stop() }
        #expect(try await client.read(uuid: BluetoothUUID(0xFFF1)) == [ATTPDU.HandleValue(handle: h, value: [0xA0, 0xA1, 1])])
        #expect(try await client.readMultiple([level, h]) == [100, 0xA0, 0xA1, 2])
        #expect(try await client.readMultipleVariable([h, level]).map(\.value) == [[0xA0, 0xA1, 3], [100]])
        await #expect(throws: GATTClientError.att(.errorResponse(request: .readMultipleRequest, handle: h, error: .readNotPermitted))) {
            _ = try await client.readMultiple([level, h])
        }
        // A request refused before it reaches the manual value never asks the application.
        await #expect(throws: GATTClientError.att(.errorResponse(request: .readMultipleRequest, handle: 0x0FFF, error: .invalidHandle))) {
            _ = try await client.readMultiple([h, 0x0FFF])
        }
        #expect(asked.kinds == Array(repeating: .read(offset: 0), count: 4))
    }

    /// A verified Signed Write Command to a manual value reaches the application as a
    /// Write Command does, and is no `written` event; a forged one reaches nobody.
    @Test func aVerifiedSignedWriteReachesTheApplication() async throws {
        let (state, signed, _, _) = try SignedWriteTests.make()
        let server = GATTServer(database: state.database, logger: GATTClientTests.logger)
        let (clientEnd, serverEnd) = ChannelEnd.pair()
        await server.attach(ATTBearer(channel: serverEnd, logger: GATTClientTests.logger), connection: 1)
        let client = GATTClient(bearer: ATTBearer(channel: clientEnd, logger: GATTClientTests.logger))
        await client.start()
        await server.setManual([signed])
        await server.setSigningKey(SigningKey(csrk: SignedWriteTests.csrk, security: LinkSecurity(encrypted: true)), connection: 1)
        try await client.writeSigned(signed, value: [4, 2], csrk: Array(SignedWriteTests.csrk.reversed()), counter: 1)
        try await client.writeSigned(signed, value: [5, 5], csrk: SignedWriteTests.csrk, counter: 2)
        let r = await firstElement(server.requests, within: .seconds(5))
        #expect(r?.handle == signed && r?.kind == .write(value: [5, 5], withResponse: false))
        // A request after both (refused: the value is not readable): the bearer served
        // them in order, so every event they caused is in before the disconnection's.
        _ = try? await client.read(signed)
        await server.detach(connection: 1)
        var events: [GATTServer.Event] = []
        for await e in server.events {
            events.append(e)
            if e == .disconnected(1) { break }
        }
        #expect(events == [.connected(1), .signCounter(connection: 1, counter: 2), .disconnected(1)])
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

    /// A server with one manual value (readable, written by Write Command) on a testing
    /// loop, serving connection 0x40 of a scripted transport: time passes only when the
    /// test advances the loop.
    private struct LoopRig {
        let t = ScriptedTransport()
        let loop = NIOAsyncTestingEventLoop()
        let server: GATTServer
        let handle: UInt16

        init() async throws {
            let logger = Logger(label: "t") { _ in SwiftLogNoOpLogHandler() }
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
                GATTCharacteristic(uuid: BluetoothUUID(0xFFF1), properties: [.read, .writeWithoutResponse], value: [7]),
            ]))
            handle = s.characteristicValues[0]
            server = GATTServer(database: db, loop: loop, logger: logger)
            await server.setManual([handle])
            await server.attach(ATTBearer(channel: L2CAPATTChannel(host: host, handle: 0x40), logger: logger), connection: 0x40)
        }

        func acl(_ pdu: [UInt8], _ boundary: ACLPacketBoundary) -> HCIPacket {
            .acl(ACLDataPacket(handle: 0x40, boundary: boundary, data: BasicFrame(channel: .att, payload: pdu).bytes))
        }
        var readRequest: HCIPacket { acl([0x0A, UInt8(handle & 0xFF), UInt8(handle >> 8)], .firstFlushable) }
        func errorResponse(_ code: ATTErrorCode) -> HCIPacket {
            acl([0x01, 0x0A, UInt8(handle & 0xFF), UInt8(handle >> 8), code.rawValue], .firstNonFlushable)
        }
    }

    /// The wait for the application's answer is the loop's time: on a testing loop, a
    /// Read Request nobody answers gets Unlikely Error when the loop's clock passes the
    /// 20 s default, not before, and with no wall-clock wait.
    @Test func anUnansweredRequestTimesOutOnTheLoopsClock() async throws {
        let rig = try await LoopRig()
        var requests = rig.server.requests.makeAsyncIterator()
        rig.t.inject(rig.readRequest)
        #expect(await requests.next()?.kind == .read(offset: 0))
        await rig.loop.advanceTime(by: .seconds(19))
        #expect(await rig.t.nextSent(timeout: .milliseconds(50)) == nil)
        await rig.loop.advanceTime(by: .seconds(1))
        #expect(await rig.t.nextSent() == rig.errorResponse(.unlikelyError))
    }

    /// A request that finds `requests` full (1024 Write Commands nobody took) is
    /// refused, counted, and answered Insufficient Resources at once, with no time
    /// passing on the loop; the requests already buffered stay, oldest first.
    @Test func aRequestThatFindsTheQueueFullIsAnsweredAtOnce() async throws {
        let rig = try await LoopRig()
        for i in 0..<1024 { rig.t.inject(rig.acl([0x52, UInt8(rig.handle & 0xFF), UInt8(rig.handle >> 8), UInt8(i & 0xFF)], .firstFlushable)) }
        rig.t.inject(rig.readRequest)
        #expect(await rig.t.nextSent() == rig.errorResponse(.insufficientResources))
        #expect(rig.server.requests.dropped.count == 1)
        var requests = rig.server.requests.makeAsyncIterator()
        #expect(await requests.next()?.kind == .write(value: [0], withResponse: false))
    }

    /// Once the consumer of `requests` is gone (its task cancelled), nobody can answer:
    /// a request is answered Unlikely Error at once, not after `manualTimeout`.
    @Test func aRequestWithNoConsumerLeftIsAnsweredAtOnce() async throws {
        let rig = try await LoopRig()
        let consumer = Task { [server = rig.server] in for await _ in server.requests {} }
        consumer.cancel()
        await consumer.value
        rig.t.inject(rig.readRequest)
        #expect(await rig.t.nextSent() == rig.errorResponse(.unlikelyError))
    }
}

/// Answers the server's manual requests as they come, the `n`th (from 1) with
/// `answer(n)`, and keeps what each asked for, until `stop()`.
final class Answerer: Sendable {
    private final class Asked: Sendable { let kinds = Mutex<[GATTServer.Request.Kind]>([]) }
    private let asked = Asked()
    private let task: Task<Void, Never>

    init(_ server: GATTServer, answer: @escaping @Sendable (Int) -> Result<[UInt8], ATTErrorCode>) {
        let asked = self.asked
        task = Task {
            for await r in server.requests {
                let n = asked.kinds.withLock { $0.append(r.kind); return $0.count }
                await server.respond(to: r.id, with: answer(n))
            }
        }
    }

    var kinds: [GATTServer.Request.Kind] { asked.kinds.withLock { $0 } }
    func stop() { task.cancel() }
}
