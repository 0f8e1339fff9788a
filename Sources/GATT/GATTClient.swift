// GATT client sub-procedures (Core Specification v5.4, Vol 3, Part G, §4.3–§4.11)
// over one ATT bearer. Discovery and long reads are the state machines of
// `GATTClientProcedures.swift` (they validate every answer); this actor only runs
// them (`run(_:)`), routes notifications and indications, and does the writes.

import ATT
import HCI
import NIOCore

public actor GATTClient {
    public nonisolated let bearer: ATTBearer
    /// The bearer's executor: the client runs on its link's event loop.
    public nonisolated var unownedExecutor: UnownedSerialExecutor { bearer.unownedExecutor }
    /// Per value handle: where its notifications and indications go (on the loop).
    private var subscribers: [UInt16: Subscriber] = [:]
    private struct Subscriber {
        var deliver: @Sendable ([UInt8]) -> Void
        var ended: @Sendable () -> Void
    }
    private var started = false
    /// What `discoverAll()` found, minus what Service Changed has since invalidated.
    public private(set) var discovered: [(DiscoveredService, [(DiscoveredCharacteristic, [DiscoveredDescriptor])])] = []
    private var serviceChangedHandle: UInt16?
    private var changeContinuations: [BufferedStream<ClosedRange<UInt16>>.Continuation] = []

    /// Where requests and commands from the peer go: a GATT server on the same link
    /// (see `GATTServer.attach(_:connection:security:readsBearer:)`); nil answers
    /// requests with Request Not Supported.
    /// Called on the loop (`GATTServer.handler(connection:)`).
    private let serverHandler: (@Sendable (ATTBearer.Incoming) -> Void)?

    public init(bearer: ATTBearer, server: (@Sendable (ATTBearer.Incoming) -> Void)? = nil) {
        self.bearer = bearer
        self.serverHandler = server
    }

    /// Starts routing notifications and indications (confirmed automatically).
    /// What the peer sends is routed synchronously on the loop this client shares with
    /// its bearer.
    public func start() async {
        guard !started else { return }
        started = true
        await bearer.setHandler({ [weak self] item in self?.assumeIsolated { $0.route(item) } },
                                closed: { [weak self] in self?.assumeIsolated { $0.finishSubscriptions() } })
        await bearer.start()
    }

    private func route(_ item: ATTBearer.Incoming) {
        switch item {
        case let .notification(h, v):
            subscribers[h]?.deliver(v)
        case let .indication(h, v):
            // Confirm first, so a consumer that stops at this value cannot lose the confirmation.
            bearer.assumeIsolated { $0.confirm() }
            if h == serviceChangedHandle, v.count == 4 {
                let start = UInt16(v[0]) | UInt16(v[1]) << 8, end = UInt16(v[2]) | UInt16(v[3]) << 8
                if start <= end { invalidate(start...end) }
            }
            subscribers[h]?.deliver(v)
        case .request, .command:
            if let serverHandler { serverHandler(item); return }
            // This client has no server here: §3.4.1.1 Request Not Supported.
            if case let .request(pdu) = item { bearer.assumeIsolated { $0.respond(.errorResponse(request: pdu.opcode, handle: 0, error: .requestNotSupported)) } }
        }
    }

    private func finishSubscriptions() {
        let ending = subscribers.values
        subscribers.removeAll()
        for s in ending { s.ended() }
        for c in changeContinuations { c.finish() }
        changeContinuations.removeAll()
    }

    private func request(_ pdu: ATTPDU) async throws -> ATTPDU {
        do { return try await bearer.request(pdu) } catch let e as ATTBearerError { throw GATTClientError.att(e) }
    }

    /// Runs `pdu`; nil when the server says Attribute Not Found (the end of a discovery).
    private func requestOrNotFound(_ pdu: ATTPDU) async throws -> ATTPDU? {
        do { return try await request(pdu) } catch GATTClientError.att(.errorResponse(_, _, .attributeNotFound)) { return nil }
    }

    // MARK: §4.3 Exchange MTU

    @discardableResult
    public func exchangeMTU() async throws -> Int {
        do { return try await bearer.exchangeMTU() } catch let e as ATTBearerError { throw GATTClientError.att(e) }
    }

    /// Runs a procedure to its end: each request goes on the bearer, each answer
    /// (an Error Response included) back to the procedure, which checks it.
    public func run<P: GATTClientProcedure>(_ procedure: P) async throws -> P.Output {
        var p = procedure
        var step = p.start()
        while true {
            switch step {
            case let .finished(output):
                return output
            case let .request(pdu):
                let answer: ATTPDU
                do {
                    answer = try await bearer.request(pdu)
                } catch let ATTBearerError.errorResponse(req, h, code) {
                    answer = .errorResponse(request: req, handle: h, error: code)
                } catch let e as ATTBearerError {
                    throw GATTClientError.att(e)
                }
                step = try p.receive(answer)
            }
        }
    }

    // MARK: §4.4 Primary service discovery

    public func discoverPrimaryServices() async throws -> [DiscoveredService] {
        try await run(PrimaryServiceDiscovery(mtu: await bearer.mtu))
    }

    public func discoverPrimaryServices(uuid: BluetoothUUID) async throws -> [DiscoveredService] {
        try await run(PrimaryServiceDiscovery(uuid: uuid, mtu: await bearer.mtu))
    }

    // MARK: §4.5 Relationship discovery

    public func findIncludedServices(of service: DiscoveredService) async throws -> [DiscoveredInclude] {
        try await run(IncludedServiceDiscovery(service: service, mtu: await bearer.mtu))
    }

    // MARK: §4.6 Characteristic discovery

    public func discoverCharacteristics(of service: DiscoveredService, uuid: BluetoothUUID? = nil) async throws -> [DiscoveredCharacteristic] {
        let found = try await run(CharacteristicDiscovery(services: [service], mtu: await bearer.mtu)).first ?? []
        return uuid.map { u in found.filter { $0.uuid == u } } ?? found
    }

    /// Every primary service, its characteristics and their descriptors, in handle order.
    public func discoverAll() async throws -> [(DiscoveredService, [(DiscoveredCharacteristic, [DiscoveredDescriptor])])] {
        let mtu = await bearer.mtu
        let services = try await run(PrimaryServiceDiscovery(mtu: mtu))
        let chars = try await run(CharacteristicDiscovery(services: services, mtu: mtu))
        let descriptors = try await run(DescriptorDiscovery(characteristics: chars.flatMap { $0 }, mtu: mtu))
        var out: [(DiscoveredService, [(DiscoveredCharacteristic, [DiscoveredDescriptor])])] = []
        var next = descriptors.makeIterator()
        for (s, cs) in zip(services, chars) { out.append((s, cs.map { ($0, next.next() ?? []) })) }
        discovered = out
        return out
    }

    /// Subscribes to the server's Service Changed indications (§7.1): each one drops
    /// the discovered services overlapping its range from `discovered` and is reported
    /// on the returned stream (buffer: the newest 64; ends with the bearer). Call after
    /// `discoverAll()`; returns nil when the server has no Service Changed.
    public func trackServiceChanges() async throws -> BufferedStream<ClosedRange<UInt16>>? {
        guard let (c, ds) = discovered.flatMap(\.1).first(where: { $0.0.uuid == BluetoothUUID(0x2A05) }),
              let cccd = ds.first(where: { $0.uuid == GATTType.clientCharacteristicConfiguration }) else { return nil }
        serviceChangedHandle = c.valueHandle
        let (stream, cont) = BufferedStream<ClosedRange<UInt16>>.makeStream(capacity: 64)
        changeContinuations.append(cont)
        _ = try await subscribe(c, cccd: cccd.handle, indications: true)
        return stream
    }

    private func invalidate(_ range: ClosedRange<UInt16>) {
        discovered.removeAll { range.overlaps($0.0.start...$0.0.end) }
        for c in changeContinuations { c.yield(range) }
    }

    // MARK: §4.7 Descriptor discovery

    public func discoverDescriptors(of c: DiscoveredCharacteristic) async throws -> [DiscoveredDescriptor] {
        try await run(DescriptorDiscovery(characteristics: [c], mtu: await bearer.mtu)).first ?? []
    }

    // MARK: §4.8 Characteristic value read (and §4.12 descriptors, the same PDUs)

    /// Reads a value; long values continue with Read Blob until a short piece arrives.
    public func read(_ handle: UInt16) async throws -> [UInt8] {
        try await run(ReadLongProcedure(handle: handle, mtu: await bearer.mtu))
    }

    /// Read Using Characteristic UUID (§4.8.2): (handle, value) of each match in range.
    public func read(uuid: BluetoothUUID, in range: ClosedRange<UInt16> = 1...0xFFFF) async throws -> [ATTPDU.HandleValue] {
        guard let rsp = try await requestOrNotFound(.readByTypeRequest(start: range.lowerBound, end: range.upperBound, type: uuid)) else { return [] }
        guard case let .readByTypeResponse(list) = rsp else { throw GATTClientError.unexpectedResponse(rsp.opcode) }
        return list
    }

    /// Read Multiple Characteristic Values (§4.8.4): the values concatenated (the
    /// caller must know their lengths).
    public func readMultiple(_ handles: [UInt16]) async throws -> [UInt8] {
        guard case let .readMultipleResponse(values) = try await request(.readMultipleRequest(handles: handles)) else {
            throw GATTClientError.unexpectedResponse(.readMultipleResponse)
        }
        return values
    }

    /// Read Multiple Variable Length Characteristic Values (§4.8.5).
    public func readMultipleVariable(_ handles: [UInt16]) async throws -> [[UInt8]] {
        guard case let .readMultipleVariableResponse(values) = try await request(.readMultipleVariableRequest(handles: handles)) else {
            throw GATTClientError.unexpectedResponse(.readMultipleVariableResponse)
        }
        return values
    }

    // MARK: §4.9 Characteristic value write

    public func writeWithoutResponse(_ handle: UInt16, value: [UInt8]) async throws {
        do { try await bearer.sendUnacknowledged(.writeCommand(handle: handle, value: value)) } catch let e as ATTBearerError { throw GATTClientError.att(e) }
    }

    /// Write Characteristic Value, or Write Long Characteristic Values when it does not fit one PDU.
    public func write(_ handle: UInt16, value: [UInt8]) async throws {
        let mtu = await bearer.mtu
        if value.count <= mtu - 3 {
            guard case .writeResponse = try await request(.writeRequest(handle: handle, value: value)) else { throw GATTClientError.unexpectedResponse(.writeResponse) }
            return
        }
        try await reliableWrite([(handle, value)], verify: false)
    }

    /// Prepares every (handle, value) in MTU-sized pieces and executes them together;
    /// with `verify`, each echoed piece must match or the queue is cancelled (§4.9.5).
    public func reliableWrite(_ writes: [(UInt16, [UInt8])], verify: Bool = true) async throws {
        let piece = await bearer.mtu - 5
        for (handle, value) in writes {
            var offset = 0
            repeat {
                let chunk = Array(value[offset..<Swift.min(value.count, offset + piece)])
                let rsp = try await request(.prepareWriteRequest(handle: handle, offset: UInt16(offset), value: chunk))
                guard case let .prepareWriteResponse(h, o, v) = rsp else { throw GATTClientError.unexpectedResponse(rsp.opcode) }
                if verify, h != handle || Int(o) != offset || v != chunk {
                    _ = try? await request(.executeWriteRequest(flags: 0))
                    throw GATTClientError.reliableWriteMismatch(handle: handle)
                }
                offset += chunk.count
            } while offset < value.count
        }
        guard case .executeWriteResponse = try await request(.executeWriteRequest(flags: 1)) else { throw GATTClientError.unexpectedResponse(.executeWriteResponse) }
    }

    // MARK: §4.10–§4.11 Notifications and indications

    /// Writes the Client Characteristic Configuration and returns the values that
    /// arrive. Buffer: the newest `capacity` values; `dropped` counts the rest. Ends
    /// when the bearer closes, on `unsubscribe`, or when the same value is subscribed again.
    public func subscribe(_ c: DiscoveredCharacteristic, cccd: UInt16, indications: Bool = false, capacity: Int = 1024) async throws -> GATTValueStream {
        let (stream, cont) = GATTValueStream.makeStream(capacity: capacity)
        try await subscribe(c, cccd: cccd, indications: indications, deliver: { cont.yield($0) }, ended: { cont.finish() })
        return stream
    }

    /// Writes the Client Characteristic Configuration; from then on each value is handed
    /// to `deliver` as it arrives, synchronously on the bearer's loop (indications
    /// already confirmed). `ended` is called once: when the bearer closes, on
    /// `unsubscribe`, or when the same value is subscribed again.
    public func subscribe(_ c: DiscoveredCharacteristic, cccd: UInt16, indications: Bool = false,
                          deliver: @escaping @Sendable ([UInt8]) -> Void, ended: @escaping @Sendable () -> Void) async throws {
        subscribers.removeValue(forKey: c.valueHandle)?.ended()
        subscribers[c.valueHandle] = Subscriber(deliver: deliver, ended: ended)
        do {
            try await write(cccd, value: [indications ? 0x02 : 0x01, 0x00])
        } catch {
            subscribers.removeValue(forKey: c.valueHandle)?.ended()
            throw error
        }
    }

    public func unsubscribe(_ c: DiscoveredCharacteristic, cccd: UInt16) async throws {
        subscribers.removeValue(forKey: c.valueHandle)?.ended()
        try await write(cccd, value: [0, 0])
    }
}

/// Values of one subscription (`GATTClient.subscribe`). Buffer: the newest N values;
/// `dropped` counts the ones lost because the consumer fell behind. Ends when the
/// bearer closes or the subscription is ended.
public typealias GATTValueStream = BufferedStream<[UInt8]>
