// GATT client sub-procedures (Core Specification v5.4, Vol 3, Part G, §4.3–§4.11)
// over one ATT bearer, or over it and enhanced bearers (EATT) spread so that each
// carries one operation at a time. Discovery and long reads are the state machines
// of `GATTClientProcedures.swift` (they validate every answer); this actor only runs
// them (`run(_:)`), routes notifications and indications, and does the writes.

import ATT
import BLECrypto
import HCI
import NIOCore

public actor GATTClient: LoopIsolated {
    public nonisolated let bearer: ATTBearer
    /// The bearer's executor: the client runs on its link's event loop.
    public nonisolated var unownedExecutor: UnownedSerialExecutor { bearer.unownedExecutor }
    public nonisolated var loop: any EventLoop { bearer.loop }
    /// Per value handle: where its notifications and indications go (on the loop).
    private var subscribers = HandleMap<Subscriber>()
    private struct Subscriber {
        var deliver: @Sendable ([UInt8]) -> Void
        var ended: @Sendable () -> Void
    }
    private var started = false
    /// What `discoverAll()` found, minus what Service Changed has since invalidated.
    public private(set) var discovered: [(DiscoveredService, [(DiscoveredCharacteristic, [DiscoveredDescriptor])])] = []
    private var serviceChangedHandle: UInt16?
    private var changeContinuations: [BufferedStream<ClosedRange<UInt16>>.Continuation] = []
    /// Enhanced bearers (EATT) added with `addEnhancedBearer`, open ones only.
    private var enhanced: [ATTBearer] = []
    /// With enhanced bearers: the bearers no operation holds, in the order they freed
    /// up, and the operations waiting for one (first come, first served).
    private var idle: [ATTBearer] = []
    private var leased: Set<ObjectIdentifier> = []
    private var bearerWaiters: [CheckedContinuation<ATTBearer, Never>] = []

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
    /// its bearer. Synchronous on that loop: called there (the facade, as a link comes
    /// up), the bearer is open before the transport's next packet is read.
    public func start() {
        guard !started else { return }
        started = true
        let bearer = self.bearer
        bearer.onLoop {
            // Held strongly (no side table, no slow retains): the bearer lets go of both when it closes.
            $0.setHandler({ item in self.onLoop((item, bearer)) { $0.route($1.0, on: $1.1, server: $0.serverHandler) } },
                          closed: { self.onLoop { $0.finishSubscriptions() } })
            $0.start()
        }
    }

    /// Adds an enhanced bearer (EATT) of the same link, on the same loop: from now on
    /// each operation (a procedure, a read, a write and its prepared writes) takes a
    /// bearer no other operation holds, so as many run at once as there are bearers.
    /// Notifications and indications are taken on every bearer (each indication
    /// confirmed on the bearer it came on); requests the peer sends on this bearer go
    /// to `server` (a GATT server answering on the same bearer,
    /// `GATTServer.handler(connection:on:)`), or get Request Not Supported.
    /// Write Commands stay on the unenhanced bearer, in order. The bearer leaves the
    /// pool when it closes. A bearer on another event loop than the unenhanced one is
    /// closed instead of added.
    public func addEnhancedBearer(_ added: ATTBearer, server: (@Sendable (ATTBearer.Incoming) -> Void)? = nil) async {
        // Routing runs synchronously on the link's loop: a bearer on another one is refused.
        guard added.loop === bearer.loop else {
            await added.close(reason: "an enhanced bearer must run on its link's event loop")
            return
        }
        let id = ObjectIdentifier(added)
        // A struct, not a tuple: a closure inside a tuple argument costs `onLoop` an
        // allocation per PDU (see `LoopIsolated.onLoop(_:_:)`).
        await added.setHandler({ item in self.onLoop(Routed(item: item, bearer: added, server: server)) { $0.route($1.item, on: $1.bearer, server: $1.server) } },
                               closed: { self.onLoop { $0.enhancedClosed(id) } })
        await added.start()
        guard await added.isOpen else { return }
        if enhanced.isEmpty, !leased.contains(ObjectIdentifier(bearer)) { idle = [bearer] }
        enhanced.append(added)
        release(added, leasedNow: false)
    }

    /// How many enhanced bearers (EATT) are open.
    public var enhancedBearerCount: Int { enhanced.count }

    private func enhancedClosed(_ id: ObjectIdentifier) {
        enhanced.removeAll { ObjectIdentifier($0) == id }
        idle.removeAll { ObjectIdentifier($0) == id }
    }

    /// A bearer for one operation: with enhanced bearers a free one (waiting for one
    /// to free up, which each transaction's 30 s timeout bounds); without them the
    /// unenhanced bearer, which queues its requests itself.
    private func lease() async -> ATTBearer {
        if enhanced.isEmpty, idle.isEmpty { return bearer }
        let b: ATTBearer
        if !idle.isEmpty { b = idle.removeFirst() } else { b = await withCheckedContinuation { bearerWaiters.append($0) } }
        leased.insert(ObjectIdentifier(b))
        return b
    }

    /// Gives a leased bearer back: to the first waiting operation, else to the idle
    /// ones. A closed enhanced bearer is not given back; when the unenhanced one has
    /// closed (the link is gone) every waiter gets it, and fails on it at once.
    private func release(_ b: ATTBearer, leasedNow: Bool = true) {
        if leasedNow { guard leased.remove(ObjectIdentifier(b)) != nil else { return } }
        let open = b === bearer ? !linkEnded : enhanced.contains { $0 === b }
        guard open else {
            if linkEnded { for w in bearerWaiters { w.resume(returning: bearer) }; bearerWaiters.removeAll() }
            return
        }
        if !bearerWaiters.isEmpty {
            leased.insert(ObjectIdentifier(b))
            bearerWaiters.removeFirst().resume(returning: b)
        } else {
            idle.append(b)
        }
    }

    /// Runs `body` on a bearer of its own (see `lease`), in a task that prefers the
    /// loop: each response resumes the procedure on the loop, and a caller without that
    /// preference sees its task once, when the procedure returns.
    private func using<T: Sendable>(_ body: (ATTBearer) async throws -> T) async throws -> T {
        try await withTaskExecutorPreference(bearer.loopExecutor.taskExecutor) {
            await mtuSettled()
            let b = await lease()
            defer { release(b) }
            return try await body(b)
        }
    }

    private var linkEnded = false

    /// What an enhanced bearer hands `route`.
    private struct Routed {
        var item: ATTBearer.Incoming
        var bearer: ATTBearer
        var server: (@Sendable (ATTBearer.Incoming) -> Void)?
    }

    private func route(_ item: ATTBearer.Incoming, on bearer: ATTBearer, server serverHandler: (@Sendable (ATTBearer.Incoming) -> Void)?) {
        switch item {
        case let .notification(h, v):
            subscribers[h]?.deliver(v)
        case let .indication(h, v):
            // Confirm first, so a consumer that stops at this value cannot lose the confirmation.
            bearer.onLoop { $0.confirm() }
            if h == serviceChangedHandle, v.count == 4 {
                let start = UInt16(v[0]) | UInt16(v[1]) << 8, end = UInt16(v[2]) | UInt16(v[3]) << 8
                if start <= end { invalidate(start...end) }
            }
            subscribers[h]?.deliver(v)
        case .request, .command:
            if let serverHandler { serverHandler(item); return }
            // This client has no server here: §3.4.1.1 Request Not Supported.
            if case let .request(pdu) = item { bearer.onLoop { $0.respond(.errorResponse(request: pdu.opcode, handle: 0, error: .requestNotSupported)) } }
        }
    }

    private func finishSubscriptions() {
        linkEnded = true
        for w in bearerWaiters { w.resume(returning: bearer) }
        bearerWaiters.removeAll()
        let ending = subscribers.values
        subscribers.removeAll()
        for s in ending { s.ended() }
        for c in changeContinuations { c.finish() }
        changeContinuations.removeAll()
        mtuWaiterGauge.finish()
    }

    private func request(_ pdu: ATTPDU, on b: ATTBearer) async throws -> ATTPDU {
        do { return try await b.request(pdu) } catch let e as ATTBearerError { throw GATTClientError.att(e) }
    }

    /// One request on a bearer of its own.
    private func request(_ pdu: ATTPDU) async throws -> ATTPDU {
        try await using { try await request(pdu, on: $0) }
    }

    // MARK: §4.3 Exchange MTU

    /// Exchange MTU (§4.3.1); returns the resulting ATT_MTU. A server that answers
    /// Request Not Supported does not support the exchange, and then "the default MTU
    /// shall be used": 23 is returned, not an error.
    @discardableResult
    public func exchangeMTU() async throws -> Int {
        try await withCheckedThrowingContinuation { k in startMTUExchange { k.resume(with: $0) } }
    }

    /// `exchangeMTU()` without waiting for it: the request is queued on the bearer at
    /// once, and `answered` gets its outcome on the loop. Every operation started
    /// before the answer comes waits for it (so its PDUs are sized by the outcome);
    /// the bearer's transaction timeout or the link's end bounds that wait.
    public func startMTUExchange(answered: @escaping @Sendable (Result<Int, any Error>) -> Void) {
        mtuExchangesOutstanding += 1
        bearer.onLoop { b in
            b.startMTUExchange { outcome in self.onLoop { $0.mtuAnswered(outcome, answered) } }
        }
    }

    /// Exchanges this client sent whose answer has not come, and the operations waiting for them.
    private var mtuExchangesOutstanding = 0
    private var mtuWaiters: [CheckedContinuation<Void, Never>] = [] {
        didSet { mtuWaiterGauge.set(mtuWaiters.count) }
    }
    private var mtuWaiterGauge = Gauge()

    private func mtuAnswered(_ outcome: Result<ATTPDU, any Error>, _ answered: @Sendable (Result<Int, any Error>) -> Void) {
        let result: Result<Int, any Error>
        switch outcome {
        case .success, .failure(ATTBearerError.errorResponse(request: _, handle: _, error: .requestNotSupported)):
            result = .success(bearer.onLoop { $0.mtu })
        case let .failure(e as ATTBearerError):
            result = .failure(GATTClientError.att(e))
        case let .failure(e):
            result = .failure(e)
        }
        mtuExchangesOutstanding -= 1
        if mtuExchangesOutstanding == 0 {
            let waiting = mtuWaiters
            mtuWaiters.removeAll()
            for w in waiting { w.resume() }
        }
        answered(result)
    }

    /// How many operations wait for an MTU exchange's answer: now, then each change
    /// (tests follow operations reaching the wait). Ends when the link does.
    package func mtuWaiterCounts() -> AsyncStream<Int> { mtuWaiterGauge.watch() }

    /// Returns once no MTU exchange this client sent waits for its answer.
    private func mtuSettled() async {
        guard mtuExchangesOutstanding > 0 else { return }
        await withCheckedContinuation { mtuWaiters.append($0) }
    }

    /// Runs a procedure to its end: each request goes on the bearer, each answer
    /// (an Error Response included) back to the procedure, which checks it.
    public func run<P: GATTClientProcedure>(_ procedure: P) async throws -> P.Output {
        try await using { try await run(procedure, on: $0) }
    }

    /// A procedure built for `b`'s ATT_MTU, run on `b` alone.
    private func run<P: GATTClientProcedure>(on b: ATTBearer, _ make: (Int) -> P) async throws -> P.Output {
        try await run(make(await b.mtu), on: b)
    }

    private func run<P: GATTClientProcedure>(_ procedure: P, on bearer: ATTBearer) async throws -> P.Output {
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
        try await using { b in try await run(on: b) { PrimaryServiceDiscovery(mtu: $0) } }
    }

    public func discoverPrimaryServices(uuid: BluetoothUUID) async throws -> [DiscoveredService] {
        try await using { b in try await run(on: b) { PrimaryServiceDiscovery(uuid: uuid, mtu: $0) } }
    }

    // MARK: §4.5 Relationship discovery

    public func findIncludedServices(of service: DiscoveredService) async throws -> [DiscoveredInclude] {
        try await using { b in try await run(on: b) { IncludedServiceDiscovery(service: service, mtu: $0) } }
    }

    /// Every include declaration in `range` (by default the whole database): one Read
    /// By Type over all of it instead of one per service, as include declarations lie
    /// only inside services (§3.2).
    public func findIncludedServices(in range: ClosedRange<UInt16> = 1...0xFFFF) async throws -> [DiscoveredInclude] {
        try await findIncludedServices(of: DiscoveredService(uuid: GATTType.primaryService, start: range.lowerBound, end: range.upperBound, isPrimary: true))
    }

    // MARK: §4.6 Characteristic discovery

    public func discoverCharacteristics(of service: DiscoveredService, uuid: BluetoothUUID? = nil) async throws -> [DiscoveredCharacteristic] {
        let found = try await using { b in try await run(on: b) { CharacteristicDiscovery(services: [service], mtu: $0) } }.first ?? []
        return uuid.map { u in found.filter { $0.uuid == u } } ?? found
    }

    /// Every primary service, its characteristics and their descriptors, in handle order.
    public func discoverAll() async throws -> [(DiscoveredService, [(DiscoveredCharacteristic, [DiscoveredDescriptor])])] {
        let out = try await using { b in
            try await discoverContents(of: try await run(on: b) { PrimaryServiceDiscovery(mtu: $0) }, on: b)
        }
        discovered = out
        return out
    }

    /// The characteristics of `services` and their descriptors, batched as in
    /// `discoverAll()` (one Read By Type range across consecutive services, several
    /// characteristics per Find Information).
    public func discoverContents(of services: [DiscoveredService]) async throws -> [(DiscoveredService, [(DiscoveredCharacteristic, [DiscoveredDescriptor])])] {
        try await using { b in try await discoverContents(of: services, on: b) }
    }

    private func discoverContents(of services: [DiscoveredService], on b: ATTBearer) async throws -> [(DiscoveredService, [(DiscoveredCharacteristic, [DiscoveredDescriptor])])] {
        let chars = try await run(on: b) { CharacteristicDiscovery(services: services, mtu: $0) }
        let descriptors = try await run(on: b) { DescriptorDiscovery(characteristics: chars.flatMap { $0 }, mtu: $0) }
        var out: [(DiscoveredService, [(DiscoveredCharacteristic, [DiscoveredDescriptor])])] = []
        var next = descriptors.makeIterator()
        for (s, cs) in zip(services, chars) { out.append((s, cs.map { ($0, next.next() ?? []) })) }
        return out
    }

    /// Takes a layout known another way (a bonded server's, stored with its Database
    /// Hash) as if `discoverAll()` had found it.
    public func adoptDiscovery(_ layout: [(DiscoveredService, [(DiscoveredCharacteristic, [DiscoveredDescriptor])])]) {
        discovered = layout
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
        try await using { b in try await run(on: b) { DescriptorDiscovery(characteristics: [c], mtu: $0) } }.first ?? []
    }

    // MARK: §4.8 Characteristic value read (and §4.12 descriptors, the same PDUs)

    /// Reads a value; long values continue with Read Blob until a short piece arrives.
    public func read(_ handle: UInt16) async throws -> [UInt8] {
        try await using { b in try await run(on: b) { ReadLongProcedure(handle: handle, mtu: $0) } }
    }

    /// Read Using Characteristic UUID (§4.8.2): (handle, value) of each match in the
    /// server's response, checked as `ReadByUUIDProcedure` says; with `all`, of every
    /// match in `range` (more requests after the first response), values whole.
    public func read(uuid: BluetoothUUID, in range: ClosedRange<UInt16> = 1...0xFFFF, all: Bool = false) async throws -> [ATTPDU.HandleValue] {
        try await using { b in try await run(on: b) { ReadByUUIDProcedure(uuid: uuid, range: range, mtu: $0, all: all) } }
    }

    /// Read Multiple Characteristic Values (§4.8.4): the values concatenated (the
    /// caller must know their lengths).
    public func readMultiple(_ handles: [UInt16]) async throws -> [UInt8] {
        guard case let .readMultipleResponse(values) = try await request(.readMultipleRequest(handles: handles)) else {
            throw GATTClientError.unexpectedResponse(.readMultipleResponse)
        }
        return values
    }

    /// Read Multiple Variable Length Characteristic Values (§4.8.5), one request: an
    /// entry per handle the response had room for, each with the value's whole length
    /// (`isComplete` false for one cut short at ATT_MTU). `readValues` completes them.
    public func readMultipleVariable(_ handles: [UInt16]) async throws -> [ATTPDU.LengthValue] {
        guard case let .readMultipleVariableResponse(values) = try await request(.readMultipleVariableRequest(handles: handles)) else {
            throw GATTClientError.unexpectedResponse(.readMultipleVariableResponse)
        }
        return values
    }

    /// The values at `handles`, whole and in order, in few round trips
    /// (`ReadValuesProcedure`: Read Multiple Variable Length, then a read of each
    /// value it cut short or left out; one read per value on a server without it).
    public func readValues(_ handles: [UInt16]) async throws -> [[UInt8]] {
        try await using { b in try await run(on: b) { ReadValuesProcedure(handles: handles, mtu: $0) } }
    }

    // MARK: §4.9 Characteristic value write

    /// Write Without Response (§4.9.1). Returns once the command is queued; when the
    /// link has fallen behind (the bearer is not writable) it waits for room first, and
    /// for the answer to an MTU exchange still outstanding.
    public func writeWithoutResponse(_ handle: UInt16, value: [UInt8]) async throws {
        await mtuSettled()
        do { try await bearer.sendWhenWritable(.writeCommand(handle: handle, value: value)) } catch let e as ATTBearerError { throw GATTClientError.att(e) }
    }

    /// Signed Write Without Response (§4.9.2): a Signed Write Command whose signature is
    /// made with `csrk` (the key we distributed to the server when bonding, least
    /// significant octet first) and `counter`, which the caller never uses twice with
    /// that key. At most ATT_MTU - 15 octets. On an encrypted link §4.9.2 asks for a
    /// plain Write Command instead; that choice is the caller's.
    public func writeSigned(_ handle: UInt16, value: [UInt8], csrk: [UInt8], counter: UInt32) async throws {
        await mtuSettled()
        let limit = await bearer.mtu - 3 - SecurityToolbox.signatureLength
        guard value.count <= limit else { throw GATTClientError.valueTooLong(length: value.count, limit: limit) }
        let message = [ATTOpcode.signedWriteCommand.rawValue, UInt8(truncatingIfNeeded: handle), UInt8(truncatingIfNeeded: handle >> 8)] + value
        let signature = try SecurityToolbox.signature(csrk: csrk, message: message, counter: counter)
        do { try await bearer.sendWhenWritable(.signedWriteCommand(handle: handle, value: value, signature: signature)) } catch let e as ATTBearerError { throw GATTClientError.att(e) }
    }

    /// Write Characteristic Value, or Write Long Characteristic Values when it does not fit one PDU.
    public func write(_ handle: UInt16, value: [UInt8]) async throws {
        try await using { b in
            let mtu = await b.mtu
            if value.count <= mtu - 3 {
                guard case .writeResponse = try await request(.writeRequest(handle: handle, value: value), on: b) else { throw GATTClientError.unexpectedResponse(.writeResponse) }
                return
            }
            try await reliableWrite([(handle, value)], on: b)
        }
    }

    /// Prepares every (handle, value) in MTU-sized pieces and executes them together, as
    /// `PreparedWriteProcedure` says: each Prepare Write Response must echo its request,
    /// or the queue is cancelled and the write fails with `preparedWriteMismatch`; a
    /// piece the server refuses cancels what was queued before its error is thrown.
    /// All of it goes on one bearer.
    public func reliableWrite(_ writes: [(UInt16, [UInt8])]) async throws {
        try await using { try await reliableWrite(writes, on: $0) }
    }

    private func reliableWrite(_ writes: [(UInt16, [UInt8])], on b: ATTBearer) async throws {
        // A Prepare Write's offset is 16 bits: no piece of a longer value could be placed.
        if let long = writes.first(where: { $0.1.count > Int(UInt16.max) }) {
            throw GATTClientError.valueTooLong(length: long.1.count, limit: Int(UInt16.max))
        }
        try await run(on: b) { PreparedWriteProcedure(writes: writes.map { (handle: $0.0, value: $0.1) }, mtu: $0) }
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

    /// Ends the subscription now and queues its CCCD write on the unenhanced bearer
    /// behind the requests already queued, without waiting for the answer (which is
    /// taken and dropped): for a facade that owes the peer this write before the
    /// program's next operation, and must not hold that operation until it is answered.
    public func unsubscribeQueued(_ c: DiscoveredCharacteristic, cccd: UInt16) async {
        subscribers.removeValue(forKey: c.valueHandle)?.ended()
        await bearer.startRequest(.writeRequest(handle: cccd, value: [0, 0])) { _ in }
    }
}

/// Values of one subscription (`GATTClient.subscribe`). Buffer: the newest N values;
/// `dropped` counts the ones lost because the consumer fell behind. Ends when the
/// bearer closes or the subscription is ended.
public typealias GATTValueStream = BufferedStream<[UInt8]>
