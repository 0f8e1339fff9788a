// GATT client sub-procedures (Core Specification v5.4, Vol 3, Part G, §4.3–§4.11)
// over one ATT bearer. Discovery takes the fewest round trips the specification
// allows: each response is filled to the MTU by the server, the next request starts
// after the last handle returned, and a range that cannot hold anything (a
// characteristic whose value is the last handle before the next one) is not asked.

import ATT
import HCI

public struct DiscoveredService: Hashable, Sendable {
    public var uuid: BluetoothUUID
    public var start: UInt16
    public var end: UInt16
    public var isPrimary: Bool
    public init(uuid: BluetoothUUID, start: UInt16, end: UInt16, isPrimary: Bool) {
        self.uuid = uuid
        self.start = start
        self.end = end
        self.isPrimary = isPrimary
    }
}

public struct DiscoveredCharacteristic: Hashable, Sendable {
    public var uuid: BluetoothUUID
    public var declarationHandle: UInt16
    public var valueHandle: UInt16
    public var properties: CharacteristicProperties
    /// Last handle that belongs to this characteristic (its descriptors end here).
    public var end: UInt16
    /// From handles known another way (a cache, a previous connection to a bonded peer).
    public init(uuid: BluetoothUUID, declarationHandle: UInt16, valueHandle: UInt16, properties: CharacteristicProperties, end: UInt16) {
        self.uuid = uuid
        self.declarationHandle = declarationHandle
        self.valueHandle = valueHandle
        self.properties = properties
        self.end = end
    }
}

public struct DiscoveredDescriptor: Hashable, Sendable {
    public var uuid: BluetoothUUID
    public var handle: UInt16
}

public struct DiscoveredInclude: Hashable, Sendable {
    public var handle: UInt16
    public var service: DiscoveredService
}

public enum GATTClientError: Error, Hashable, Sendable, CustomStringConvertible {
    case att(ATTBearerError)
    case unexpectedResponse(ATTOpcode)
    /// A Reliable Write's prepared value did not come back as sent; the queue was cancelled.
    case reliableWriteMismatch(handle: UInt16)
    case noClientConfiguration(valueHandle: UInt16)

    public var description: String {
        switch self {
        case let .att(e): return "\(e)"
        case let .unexpectedResponse(op): return "unexpected \(op)"
        case let .reliableWriteMismatch(h): return "reliable write to 0x\(String(h, radix: 16)) came back changed; cancelled"
        case let .noClientConfiguration(h): return "characteristic 0x\(String(h, radix: 16)) has no Client Characteristic Configuration"
        }
    }
}

public actor GATTClient {
    public nonisolated let bearer: ATTBearer
    private var subscribers: [UInt16: AsyncStream<[UInt8]>.Continuation] = [:]
    private var dispatcher: Task<Void, Never>?
    /// What `discoverAll()` found, minus what Service Changed has since invalidated.
    public private(set) var discovered: [(DiscoveredService, [(DiscoveredCharacteristic, [DiscoveredDescriptor])])] = []
    private var serviceChangedHandle: UInt16?
    private var changeContinuations: [AsyncStream<ClosedRange<UInt16>>.Continuation] = []

    /// Where requests and commands from the peer go: a GATT server on the same link
    /// (see `GATTServer.attach(_:connection:security:readsBearer:)`); nil answers
    /// requests with Request Not Supported.
    private let serverHandler: (@Sendable (ATTBearer.Incoming) async -> Void)?

    public init(bearer: ATTBearer, server: (@Sendable (ATTBearer.Incoming) async -> Void)? = nil) {
        self.bearer = bearer
        self.serverHandler = server
    }

    /// Starts routing notifications and indications (confirmed automatically).
    public func start() async {
        guard dispatcher == nil else { return }
        await bearer.start()
        let incoming = bearer.incoming
        dispatcher = Task { [weak self] in
            for await item in incoming { await self?.route(item) }
            await self?.finishSubscriptions()
        }
    }

    private func route(_ item: ATTBearer.Incoming) async {
        switch item {
        case let .notification(h, v):
            subscribers[h]?.yield(v)
        case let .indication(h, v):
            // Confirm first, so a consumer that stops at this value cannot lose the confirmation.
            await bearer.confirm()
            if h == serviceChangedHandle, v.count == 4 {
                let start = UInt16(v[0]) | UInt16(v[1]) << 8, end = UInt16(v[2]) | UInt16(v[3]) << 8
                if start <= end { invalidate(start...end) }
            }
            subscribers[h]?.yield(v)
        case .request, .command:
            if let serverHandler { await serverHandler(item); return }
            // This client has no server here: §3.4.1.1 Request Not Supported.
            if case let .request(pdu) = item { await bearer.respond(.errorResponse(request: pdu.opcode, handle: 0, error: .requestNotSupported)) }
        }
    }

    private func finishSubscriptions() {
        for (_, c) in subscribers { c.finish() }
        subscribers.removeAll()
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

    // MARK: §4.4 Primary service discovery

    public func discoverPrimaryServices() async throws -> [DiscoveredService] {
        var out: [DiscoveredService] = []
        var start: UInt16 = 1
        while true {
            guard let rsp = try await requestOrNotFound(.readByGroupTypeRequest(start: start, end: 0xFFFF, type: GATTType.primaryService)) else { break }
            guard case let .readByGroupTypeResponse(list) = rsp, let last = list.last else { throw GATTClientError.unexpectedResponse(rsp.opcode) }
            for g in list { out.append(DiscoveredService(uuid: try BluetoothUUID(littleEndian: g.value), start: g.handle, end: g.groupEnd, isPrimary: true)) }
            guard last.groupEnd < 0xFFFF, last.groupEnd >= start else { break }
            start = last.groupEnd + 1
        }
        return out
    }

    public func discoverPrimaryServices(uuid: BluetoothUUID) async throws -> [DiscoveredService] {
        var out: [DiscoveredService] = []
        var start: UInt16 = 1
        while true {
            guard let rsp = try await requestOrNotFound(.findByTypeValueRequest(start: start, end: 0xFFFF, type: 0x2800, value: uuid.attBytes)) else { break }
            guard case let .findByTypeValueResponse(list) = rsp, let last = list.last else { throw GATTClientError.unexpectedResponse(rsp.opcode) }
            for r in list { out.append(DiscoveredService(uuid: uuid, start: r.found, end: r.groupEnd, isPrimary: true)) }
            guard last.groupEnd < 0xFFFF, last.groupEnd >= start else { break }
            start = last.groupEnd + 1
        }
        return out
    }

    // MARK: §4.5 Relationship discovery

    public func findIncludedServices(of service: DiscoveredService) async throws -> [DiscoveredInclude] {
        var out: [DiscoveredInclude] = []
        var start = service.start
        while start <= service.end {
            guard let rsp = try await requestOrNotFound(.readByTypeRequest(start: start, end: service.end, type: GATTType.include)) else { break }
            guard case let .readByTypeResponse(list) = rsp, let last = list.last else { throw GATTClientError.unexpectedResponse(rsp.opcode) }
            for e in list where e.value.count >= 4 {
                let s = UInt16(e.value[0]) | UInt16(e.value[1]) << 8, end = UInt16(e.value[2]) | UInt16(e.value[3]) << 8
                var uuid: BluetoothUUID
                if e.value.count == 6 {
                    uuid = try BluetoothUUID(littleEndian: Array(e.value[4...5]))
                } else {
                    // 128-bit: read it from the included service's declaration (§4.5.1).
                    guard case let .readResponse(v) = try await request(.readRequest(handle: s)) else { throw GATTClientError.unexpectedResponse(.readResponse) }
                    uuid = try BluetoothUUID(littleEndian: v)
                }
                out.append(DiscoveredInclude(handle: e.handle, service: DiscoveredService(uuid: uuid, start: s, end: end, isPrimary: false)))
            }
            guard last.handle < service.end else { break }
            start = last.handle + 1
        }
        return out
    }

    // MARK: §4.6 Characteristic discovery

    public func discoverCharacteristics(of service: DiscoveredService, uuid: BluetoothUUID? = nil) async throws -> [DiscoveredCharacteristic] {
        var found: [DiscoveredCharacteristic] = []
        var start = service.start
        while start <= service.end {
            guard let rsp = try await requestOrNotFound(.readByTypeRequest(start: start, end: service.end, type: GATTType.characteristic)) else { break }
            guard case let .readByTypeResponse(list) = rsp, let last = list.last else { throw GATTClientError.unexpectedResponse(rsp.opcode) }
            for e in list where e.value.count == 5 || e.value.count == 19 {
                let valueHandle = UInt16(e.value[1]) | UInt16(e.value[2]) << 8
                found.append(DiscoveredCharacteristic(
                    uuid: try BluetoothUUID(littleEndian: Array(e.value[3...])), declarationHandle: e.handle, valueHandle: valueHandle,
                    properties: CharacteristicProperties(rawValue: e.value[0]), end: service.end))
            }
            guard last.handle < service.end else { break }
            start = last.handle + 1
        }
        // Each characteristic ends just before the next declaration.
        for i in found.indices.dropLast() { found[i].end = found[i + 1].declarationHandle - 1 }
        return uuid.map { u in found.filter { $0.uuid == u } } ?? found
    }

    /// Every primary service, its characteristics and their descriptors, in handle order.
    public func discoverAll() async throws -> [(DiscoveredService, [(DiscoveredCharacteristic, [DiscoveredDescriptor])])] {
        var out: [(DiscoveredService, [(DiscoveredCharacteristic, [DiscoveredDescriptor])])] = []
        for s in try await discoverPrimaryServices() {
            var chars: [(DiscoveredCharacteristic, [DiscoveredDescriptor])] = []
            for c in try await discoverCharacteristics(of: s) { chars.append((c, try await discoverDescriptors(of: c))) }
            out.append((s, chars))
        }
        discovered = out
        return out
    }

    /// Subscribes to the server's Service Changed indications (§7.1): each one drops
    /// the discovered services overlapping its range from `discovered` and is reported
    /// on the returned stream (buffer: unbounded; ends with the bearer). Call after
    /// `discoverAll()`; returns nil when the server has no Service Changed.
    public func trackServiceChanges() async throws -> AsyncStream<ClosedRange<UInt16>>? {
        guard let (c, ds) = discovered.flatMap(\.1).first(where: { $0.0.uuid == BluetoothUUID(0x2A05) }),
              let cccd = ds.first(where: { $0.uuid == GATTType.clientCharacteristicConfiguration }) else { return nil }
        serviceChangedHandle = c.valueHandle
        let (stream, cont) = AsyncStream<ClosedRange<UInt16>>.makeStream()
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
        var out: [DiscoveredDescriptor] = []
        guard c.valueHandle < c.end else { return out }  // no room for descriptors: no request
        var start = c.valueHandle + 1
        while start <= c.end {
            guard let rsp = try await requestOrNotFound(.findInformationRequest(start: start, end: c.end)) else { break }
            guard case let .findInformationResponse(list) = rsp, let last = list.last else { throw GATTClientError.unexpectedResponse(rsp.opcode) }
            out += list.map { DiscoveredDescriptor(uuid: $0.uuid, handle: $0.handle) }
            guard last.handle < c.end else { break }
            start = last.handle + 1
        }
        return out
    }

    // MARK: §4.8 Characteristic value read (and §4.12 descriptors, the same PDUs)

    /// Reads a value; long values continue with Read Blob until a short piece arrives.
    public func read(_ handle: UInt16) async throws -> [UInt8] {
        let mtu = await bearer.mtu
        guard case var .readResponse(value) = try await request(.readRequest(handle: handle)) else { throw GATTClientError.unexpectedResponse(.readResponse) }
        var piece = value.count
        while piece == mtu - 1, value.count < 512 {
            let rsp: ATTPDU
            do { rsp = try await request(.readBlobRequest(handle: handle, offset: UInt16(value.count))) } catch GATTClientError.att(.errorResponse(_, _, .attributeNotLong)) {
                break
            } catch GATTClientError.att(.errorResponse(_, _, .invalidOffset)) {
                break
            }
            guard case let .readBlobResponse(more) = rsp else { throw GATTClientError.unexpectedResponse(rsp.opcode) }
            value += more
            piece = more.count
        }
        return value
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
    /// arrive. Buffer: unbounded; ends when the bearer closes or on `unsubscribe`.
    public func subscribe(_ c: DiscoveredCharacteristic, cccd: UInt16, indications: Bool = false) async throws -> AsyncStream<[UInt8]> {
        let (stream, cont) = AsyncStream<[UInt8]>.makeStream()
        subscribers[c.valueHandle]?.finish()
        subscribers[c.valueHandle] = cont
        try await write(cccd, value: [indications ? 0x02 : 0x01, 0x00])
        return stream
    }

    public func unsubscribe(_ c: DiscoveredCharacteristic, cccd: UInt16) async throws {
        subscribers.removeValue(forKey: c.valueHandle)?.finish()
        try await write(cccd, value: [0, 0])
    }
}
