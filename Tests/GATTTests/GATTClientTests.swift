import ATT
import BLETesting
import HCI
import Logging
import NIOCore
import NIOPosix
import Synchronization
import Testing
@testable import GATT

/// Two ATT channels wired back to back in memory, on one loop; counts what each side sends.
final class ChannelEnd: ATTChannel, @unchecked Sendable {
    weak var peer: ChannelEnd?
    let loop: any EventLoop
    let sent = Mutex<[[UInt8]]>([])
    private struct Inbox {
        var deliver: (@Sendable (ATTChannelInput) -> Void)?
        var pending: [[UInt8]] = []
    }
    private let inbox = Mutex(Inbox())

    init(loop: any EventLoop) { self.loop = loop }

    func open(_ deliver: @escaping @Sendable (ATTChannelInput) -> Void) {
        let pending = inbox.withLock { box in
            box.deliver = deliver
            defer { box.pending = [] }
            return box.pending
        }
        for p in pending { deliver(.frame(p[...])) }
    }

    /// What becomes of a PDU this end sends.
    enum Route {
        /// The peer gets it.
        case pass
        /// Kept until `release()` (a server slow to answer).
        case hold
        /// The peer never sees it; this end gets `answer` as if the peer had sent it.
        case answer([UInt8])
    }
    let route = Mutex<(@Sendable ([UInt8]) -> Route)?>(nil)
    private let held = Mutex<[[UInt8]]>([])

    func write(_ pdu: [UInt8], done: (@Sendable (Bool) -> Void)?) -> Bool {
        sent.withLock { $0.append(pdu) }
        switch route.withLock({ $0 })?(pdu) ?? .pass {
        case .pass: peer?.arrive(pdu)
        case .hold: held.withLock { $0.append(pdu) }
        case let .answer(answer): arrive(answer)
        }
        done?(true)
        return true
    }

    /// Sends what `rewrite` held, in order.
    func release() {
        for pdu in held.withLock({ h in defer { h = [] }; return h }) { peer?.arrive(pdu) }
    }

    /// The peer's PDU: handled on the loop after what runs now (in order), or kept until open.
    private func arrive(_ pdu: [UInt8]) {
        let deliver = inbox.withLock { box -> (@Sendable (ATTChannelInput) -> Void)? in
            if box.deliver == nil { box.pending.append(pdu) }
            return box.deliver
        }
        if let deliver { loop.execute { deliver(.frame(pdu[...])) } }
    }

    var closeReason: String { "closed" }

    static func pair() -> (ChannelEnd, ChannelEnd) {
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        let a = ChannelEnd(loop: loop), b = ChannelEnd(loop: loop)
        a.peer = b
        b.peer = a
        return (a, b)
    }
}

@Suite(.timeLimit(.minutes(3)))
struct GATTClientTests {
    static let logger = Logger(label: "t") { _ in SwiftLogNoOpLogHandler() }
    static let custom = BluetoothUUID("6E400001-B5A3-F393-E0A9-E50E24DCCA9E")!

    func setUp(mtu: UInt16 = 23) async throws -> (GATTClient, GATTServer, ChannelEnd, ServiceHandles, ServiceHandles) {
        var db = AttributeDatabase()
        let battery = try db.add(GATTService(uuid: BluetoothUUID(0x180F), characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0x2A19), properties: [.read, .notify], value: [100], descriptors: [.userDescription("Battery")]),
        ]))
        let secondary = try db.add(GATTService(uuid: Self.custom, isPrimary: false))
        let custom = try db.add(GATTService(uuid: BluetoothUUID(0xFFF0), includes: [secondary.start], characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF1), properties: [.read, .write], value: (0..<200).map { UInt8($0) }),
            GATTCharacteristic(uuid: Self.custom, properties: [.read, .indicate], value: [1]),
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF3), properties: [.read, .write, .writeWithoutResponse], value: []),
        ]))
        let server = GATTServer(database: db, logger: Self.logger)
        let (clientEnd, serverEnd) = ChannelEnd.pair()
        await server.attach(ATTBearer(channel: serverEnd, localRxMTU: mtu, logger: Self.logger), connection: 1)
        let client = GATTClient(bearer: ATTBearer(channel: clientEnd, localRxMTU: mtu, logger: Self.logger))
        await client.start()
        return (client, server, clientEnd, battery, custom)
    }

    /// The server reads the link's security from its source as each request is judged:
    /// the moment the source says encrypted, the next read goes through, with no
    /// `setSecurity` in between (the facade's source is the Security Manager's record).
    @Test func requestsAreJudgedByTheSecuritySourceAtOnce() async throws {
        var db = AttributeDatabase()
        let s = try db.add(GATTService(uuid: BluetoothUUID(0xFFF0), characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF1), properties: [.read], permissions: [.readEncrypted], value: [7]),
        ]))
        let server = GATTServer(database: db, logger: Self.logger)
        let (clientEnd, serverEnd) = ChannelEnd.pair()
        await server.attach(ATTBearer(channel: serverEnd, logger: Self.logger), connection: 1)
        let client = GATTClient(bearer: ATTBearer(channel: clientEnd, logger: Self.logger))
        await client.start()
        let encrypted = Mutex(false)
        await server.setSecuritySource { c in c == 1 && encrypted.withLock { $0 } ? LinkSecurity(encrypted: true) : nil }
        let h = s.characteristicValues[0]
        await #expect(throws: GATTClientError.att(.errorResponse(request: .readRequest, handle: h, error: .insufficientAuthentication))) {
            _ = try await client.read(h)
        }
        encrypted.withLock { $0 = true }
        #expect(try await client.read(h) == [7])
    }

    @Test func discoveryFindsEverythingInFewRoundTrips() async throws {
        let (client, _, wire, battery, custom) = try await setUp()
        let services = try await client.discoverPrimaryServices()
        #expect(services.map(\.uuid) == [BluetoothUUID(0x180F), BluetoothUUID(0xFFF0)])
        #expect(services.map(\.start) == [battery.start, custom.start])
        // Both 16-bit services fit one response; the second request finds nothing more.
        #expect(wire.sent.withLock { $0.count } == 2)
        let includes = try await client.findIncludedServices(of: services[1])
        #expect(includes.map(\.service.uuid) == [Self.custom])  // 128-bit: read from its declaration
        let chars = try await client.discoverCharacteristics(of: services[1])
        #expect(chars.map(\.uuid) == [BluetoothUUID(0xFFF1), Self.custom, BluetoothUUID(0xFFF3)])
        #expect(chars.map(\.valueHandle) == custom.characteristicValues)
        let before = wire.sent.withLock { $0.count }
        // FFF1 ends right after its value: no Find Information is sent for it.
        #expect(try await client.discoverDescriptors(of: chars[0]).isEmpty)
        #expect(wire.sent.withLock { $0.count } == before)
        let batteryChars = try await client.discoverCharacteristics(of: services[0])
        let descriptors = try await client.discoverDescriptors(of: batteryChars[0])
        #expect(descriptors.map(\.uuid) == [GATTType.clientCharacteristicConfiguration, GATTType.userDescription])
        #expect(try await client.discoverPrimaryServices(uuid: BluetoothUUID(0xFFF0)).map(\.end) == [custom.end])
    }

    @Test func longReadAndLongWriteAtTheDefaultMTU() async throws {
        let (client, server, _, _, custom) = try await setUp()
        let h = custom.characteristicValues[0]
        #expect(try await client.read(h) == (0..<200).map { UInt8($0) })
        let newValue = (0..<150).map { UInt8(255 - $0) }
        try await client.write(h, value: newValue)
        #expect(await server.database.attribute(h)?.value == newValue)
        try await client.reliableWrite([(custom.characteristicValues[2], [1, 2, 3]), (h, [9])])
        #expect(await server.database.attribute(custom.characteristicValues[2])?.value == [1, 2, 3])
        #expect(await server.database.attribute(h)?.value.first == 9)
        try await client.writeWithoutResponse(custom.characteristicValues[2], value: [4])
        #expect(try await client.read(custom.characteristicValues[2]) == [4])
        #expect(try await client.readMultipleVariable([custom.characteristicValues[2], custom.characteristicValues[1]]).map(\.value) == [[4], [1]])
    }

    /// §4.3.1: a server that answers Exchange MTU with Request Not Supported does not
    /// support it, and "the default MTU shall be used": 23, not an error. Any other
    /// Error Response is one.
    @Test func anMTUExchangeRefusedAsNotSupportedLeavesTheDefault() async throws {
        let (client, _, wire, _, custom) = try await setUp(mtu: 100)
        wire.route.withLock { $0 = { $0.first == 0x02 ? .answer([0x01, 0x02, 0x00, 0x00, 0x06]) : .pass } }
        #expect(try await client.exchangeMTU() == 23)
        // Sized for 23: the 200-octet value comes in pieces of 22.
        #expect(try await client.read(custom.characteristicValues[0]) == (0..<200).map { UInt8($0) })
        #expect(wire.sent.withLock { $0.filter { $0.first == 0x0A || $0.first == 0x0C }.count } == 10)
        wire.route.withLock { $0 = { $0.first == 0x02 ? .answer([0x01, 0x02, 0x00, 0x00, 0x0E]) : .pass } }
        await #expect(throws: GATTClientError.att(.errorResponse(request: .exchangeMTURequest, handle: 0, error: .unlikelyError))) {
            try await client.exchangeMTU()
        }
    }

    /// An operation started while an MTU exchange waits for its answer (what
    /// `Central.connect` leaves behind for a slow server) waits for it, and is sized by
    /// its outcome: at ATT_MTU 100 the 200-octet value is read in three requests, all
    /// of it. Sized for 23, the 99-octet first piece would break the procedure.
    @Test func operationsWaitForAnOutstandingMTUExchange() async throws {
        let (client, _, wire, _, custom) = try await setUp(mtu: 100)
        let serverEnd = try #require(wire.peer)
        serverEnd.route.withLock { $0 = { $0.first == 0x03 ? .hold : .pass } }
        let answered = Mutex<Result<Int, any Error>?>(nil)
        await client.startMTUExchange { r in answered.withLock { $0 = r } }
        let h = custom.characteristicValues[0]
        let read = Task { try await client.read(h) }
        let written = Task { try await client.writeWithoutResponse(custom.characteristicValues[2], value: Array(repeating: 7, count: 90)) }
        // Both wait for the answer: the client tells each change of their count.
        #expect(await firstElement(client.mtuWaiterCounts().filter { $0 >= 2 }, within: .seconds(5)) == 2)
        // Only the exchange went out: the read and the command wait for its answer.
        #expect(wire.sent.withLock { $0 } == [[0x02, 100, 0]])
        #expect(await client.bearer.mtu == 23)
        serverEnd.route.withLock { $0 = nil }
        serverEnd.release()
        #expect(try await read.value == (0..<200).map { UInt8($0) })
        try await written.value
        #expect(try answered.withLock { try $0?.get() } == 100)
        #expect(wire.sent.withLock { $0.filter { $0.first == 0x0A || $0.first == 0x0C }.count } == 3)
    }

    @Test func errorsComeBackTyped() async throws {
        let (client, _, _, battery, _) = try await setUp()
        await #expect(throws: GATTClientError.att(.errorResponse(request: .writeRequest, handle: battery.characteristicValues[0], error: .writeNotPermitted))) {
            try await client.write(battery.characteristicValues[0], value: [1])
        }
        await #expect(throws: GATTClientError.att(.errorResponse(request: .readRequest, handle: 0x0999, error: .invalidHandle))) {
            try await client.read(0x0999)
        }
    }

    @Test func notificationsAndIndicationsArriveOnTheirStreams() async throws {
        let (client, server, _, battery, custom) = try await setUp()
        let services = try await client.discoverPrimaryServices()
        let level = try #require(try await client.discoverCharacteristics(of: services[0]).first)
        let values = try await client.subscribe(level, cccd: try #require(battery.clientConfigurations[0]))
        #expect(await server.notify(level.valueHandle, value: [55]) == [1])
        var it = values.makeAsyncIterator()
        #expect(await it.next() == [55])
        let ind = try #require(try await client.discoverCharacteristics(of: services[1], uuid: Self.custom).first)
        let indications = try await client.subscribe(ind, cccd: try #require(custom.clientConfigurations[1]), indications: true)
        // indicate() returns once the client confirmed.
        #expect(await server.indicate(ind.valueHandle, value: [8]) == [1])
        var it2 = indications.makeAsyncIterator()
        #expect(await it2.next() == [8])
    }
}
