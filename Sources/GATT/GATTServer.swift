// The GATT server actor: one database, any number of connections, each on its own
// ATT bearer. It answers requests through `GATTServerState`, reports writes and
// subscriptions, and sends notifications and indications to the connections whose
// Client Characteristic Configuration asks for them.

import ATT
import HCI
import L2CAP
import Logging
import NIOCore
import NIOPosix

public actor GATTServer: LoopIsolated {
    public enum Event: Hashable, Sendable {
        case written(handle: UInt16, value: [UInt8], connection: UInt16)
        case subscription(valueHandle: UInt16, connection: UInt16, notify: Bool, indicate: Bool)
        case connected(UInt16)
        case disconnected(UInt16)
        /// A request was refused for the link's security (Insufficient Authentication,
        /// Encryption or Encryption Key Size); `level` is what the refused attribute asks
        /// for (authenticated, or encrypted): a peripheral answers with a Security Request
        /// for it (Vol 3, Part H, §2.4.6).
        case securityNeeded(connection: UInt16, level: SecurityLevel)
        /// A Signed Write Command verified with the connection's `SigningKey`: its
        /// SignCounter, to keep with the client's bond (the next must be greater).
        case signCounter(connection: UInt16, counter: UInt32)
        /// What a bond keeps of the client beside its CCCDs changed
        /// (`clientRecord(connection:)`): Client Supported Features bits it set, or it
        /// became change-aware.
        case clientRecordChanged(connection: UInt16)
    }

    /// The event loop the server runs on: the controller's, so serving a request on one
    /// of its links needs no thread hop.
    public nonisolated let loop: any EventLoop
    /// The loop's actors' executor (held here: `unownedExecutor` does not keep it).
    public nonisolated let loopExecutor: LoopExecutor
    public nonisolated let unownedExecutor: UnownedSerialExecutor
    // `@exclusivity(unchecked)` below: state on the loop alone, and no access to it calls
    // out while under way (docs/architecture.md, "Decisions worth knowing").
    @exclusivity(unchecked) private var state: GATTServerState
    @exclusivity(unchecked) private var bearers = BearerTable()
    /// Each connection's enhanced bearers (EATT), beside its unenhanced one.
    private var enhanced: [UInt16: [ATTBearer]] = [:]
    private var security: [UInt16: LinkSecurity] = [:]
    /// Where a link's security is read at the moment a request is judged (the Security
    /// Manager's own record, on the same loop), before `security`.
    private var securitySource: (@Sendable (UInt16) -> LinkSecurity?)?
    private let logger: Logger
    private let continuation: BufferedStream<Event>.Continuation
    /// Called with each event as it happens, on the loop (`addEventObserver`).
    private var observers: [@Sendable (Event) -> Void] = []
    /// Writes, subscriptions and connection changes. Buffer: the newest 4096, drops
    /// counted in `events.dropped`; never ends. Finished at once, and never fed, for a
    /// server made with `streamsEvents: false` (its user takes them by observer).
    public nonisolated let events: BufferedStream<Event>
    private let streamsEvents: Bool

    /// Calls `observer` with each event as it happens, synchronously on the loop, before
    /// the server handles the link's next PDU: for what must keep pace with the peer (a
    /// bonded client's CCCDs stored as it writes them, not after a link's end the
    /// `events` follower may not have reached yet).
    public func addEventObserver(_ observer: @escaping @Sendable (Event) -> Void) { observers.append(observer) }

    private func emit(_ e: Event) {
        for o in observers { o(e) }
        if streamsEvents { continuation.yield(e) }
    }

    /// A read or write of a value the application answers itself (`setManual(_:)`).
    public struct Request: Hashable, Sendable {
        public enum Kind: Hashable, Sendable {
            /// Read Request (offset 0) or Read Blob Request.
            case read(offset: Int)
            /// Write Request (`withResponse`) or Write Command.
            case write(value: [UInt8], withResponse: Bool)
        }
        public var id: UInt64
        public var connection: UInt16
        public var handle: UInt16
        public var kind: Kind
    }
    private let requestContinuation: BufferedStream<Request>.Continuation
    /// Requests for manual handles, in arrival order. Buffer: the oldest 1024 (ATT
    /// allows one request in flight per connection, so it holds at most one per
    /// connection plus Write Commands); a request that finds it full is refused, counted
    /// in `dropped`, and answered at once with Insufficient Resources (a Write Command
    /// has no answer). Never ends by itself; once its consumer's task is cancelled, each
    /// request is answered Unlikely Error at once instead of after `manualTimeout`.
    /// Answer each with `respond(to:with:)`. Empty once a request handler is set
    /// (`setRequestHandler`).
    public nonisolated let requests: BufferedStream<Request>
    /// Where requests go instead of `requests` (`setRequestHandler`).
    private var requestHandler: (@Sendable (Request) -> Void)?

    /// Hands each request for a manual handle to `handler`, synchronously on the loop as
    /// the server takes it, instead of to `requests` (nothing buffered, nothing
    /// dropped): for a layer on the same loop (the facade). The handler may answer at
    /// once (`respond(to:with:)`).
    public func setRequestHandler(_ handler: @escaping @Sendable (Request) -> Void) { requestHandler = handler }

    /// Hands `r` to the handler or the stream; the error to answer it with at once when
    /// the stream refused it (full, or its consumer gone), nil when it was taken.
    @discardableResult
    private func hand(_ r: Request) -> ATTErrorCode? {
        if let requestHandler {
            requestHandler(r)
            return nil
        }
        switch requestContinuation.yield(r) {
        case .enqueued: return nil
        case .dropped: return .insufficientResources
        case .terminated: return .unlikelyError
        }
    }
    private var manual: Set<UInt16> = []
    private var pending: [UInt64: CheckedContinuation<Result<[UInt8], ATTErrorCode>, Never>] = [:]
    private var nextRequest: UInt64 = 1
    /// How long the application has to answer before the peer gets Unlikely Error
    /// (below ATT's 30 s transaction timeout, so the bearer survives).
    public var manualTimeout: Duration = .seconds(20)

    /// `loop`: the controller's (`HCIController.loop`) so the server and its links share
    /// one executor; by default one of NIO's shared loops. `streamsEvents: false` for a
    /// user that takes the events by observer (`addEventObserver`): `events` is then
    /// finished at once, and holds nothing nobody reads.
    public init(database: AttributeDatabase, prepareQueueLimit: Int = 64, loop: (any EventLoop)? = nil, streamsEvents: Bool = true, logger: Logger) {
        self.loop = loop ?? MultiThreadedEventLoopGroup.singleton.next()
        self.loopExecutor = LoopExecutor.of(self.loop)
        self.unownedExecutor = loopExecutor.asUnownedSerialExecutor()
        self.state = GATTServerState(database: database, prepareQueueLimit: prepareQueueLimit)
        self.logger = logger
        (events, continuation) = BufferedStream<Event>.makeStream(capacity: 4096)
        self.streamsEvents = streamsEvents
        if !streamsEvents { continuation.finish() }
        (requests, requestContinuation) = BufferedStream<Request>.makeStream(capacity: 1024, keeping: .oldest)
    }

    /// Value handles whose reads and writes go to `requests` instead of the database:
    /// Read, Read Blob, Read By Type, Read Multiple (Variable), Write Request and Command,
    /// a verified Signed Write, and an executed long or reliable write (one request with
    /// the whole value). Permissions are still checked first; the application never sees
    /// a request the peer could not make.
    public func setManual(_ handles: Set<UInt16>) { manual = handles }

    /// How long the application has to answer (default 20 s).
    public func setManualTimeout(_ d: Duration) { manualTimeout = d }

    /// Answers request `id`: a read with the whole value (the server applies a Read
    /// Blob's offset and the MTU), a write with `[]`; or an ATT error code. Unknown or
    /// already answered ids are ignored.
    public func respond(to id: UInt64, with result: Result<[UInt8], ATTErrorCode>) {
        pending.removeValue(forKey: id)?.resume(returning: result)
    }

    /// Whether request `id` still waits for its answer.
    public func isPending(_ id: UInt64) -> Bool { pending[id] != nil }

    private func ask(_ connection: UInt16, _ handle: UInt16, _ kind: Request.Kind) async -> Result<[UInt8], ATTErrorCode> {
        let id = nextRequest
        nextRequest += 1
        // The loop's time, as every timer of the stack: unanswered, the request fails.
        let timer = LoopTimer(after: manualTimeout, on: loop) { [weak self] in
            self?.onLoop(id) { $0.respond(to: $1, with: .failure(.unlikelyError)) }
        }
        defer { timer.cancel() }
        return await withCheckedContinuation { c in
            pending[id] = c
            if let refused = hand(Request(id: id, connection: connection, handle: handle, kind: kind)) {
                respond(to: id, with: .failure(refused))
            }
        }
    }

    /// Answers a request on a manual handle, if `pdu` is one; false otherwise.
    private func serveManually(_ pdu: ATTPDU, connection: UInt16, bearer: ATTBearer) async -> Bool {
        let sec = linkSecurity(connection)
        func fail(_ code: ATTErrorCode, _ h: UInt16) async { await bearer.respond(.errorResponse(request: pdu.opcode, handle: h, error: code)) }
        switch pdu {
        case let .readRequest(h) where manual.contains(h), let .readBlobRequest(h, _) where manual.contains(h):
            guard let a = state.database.attribute(h) else { return false }
            if let code = state.readDenied(a, sec) { await fail(code, h); return true }
            var offset = 0
            if case let .readBlobRequest(_, o) = pdu { offset = Int(o) }
            let mtu = await bearer.mtu
            switch await ask(connection, h, .read(offset: offset)) {
            case let .failure(code): await fail(code, h)
            case let .success(v) where offset > v.count: await fail(.invalidOffset, h)
            case let .success(v):
                let piece = Array(v[offset...].prefix(mtu - 1))
                await bearer.respond(offset == 0 && pdu.opcode == .readRequest ? .readResponse(value: piece) : .readBlobResponse(value: piece))
            }
            return true
        case let .writeRequest(h, v) where manual.contains(h):
            if let code = state.writeDenied(h, v, sec, connection: connection) { await fail(code, h); return true }
            switch await ask(connection, h, .write(value: v, withResponse: true)) {
            case let .failure(code): await fail(code, h)
            case .success: await bearer.respond(.writeResponse)
            }
            return true
        case .writeCommand:
            return takeManualCommand(pdu, connection: connection)
        case .executeWriteRequest(flags: 1) where state.preparedHandles(connection: connection).contains(where: manual.contains):
            // A long or reliable write: every value built and checked first; the
            // application then accepts or refuses each of its own whole, and only when it
            // has accepted them all are the others written (§3.4.6.3).
            let writes: [(handle: UInt16, value: [UInt8])]
            switch state.takePreparedWrites(connection: connection) {
            case let .failure(refusal): await fail(refusal.error, refusal.handle); return true
            case let .success(w): writes = w
            }
            for w in writes where manual.contains(w.handle) {
                if case let .failure(code) = await ask(connection, w.handle, .write(value: w.value, withResponse: true)) {
                    await fail(code, w.handle)
                    return true
                }
            }
            var effects: [GATTServerState.Effect] = []
            for w in writes where !manual.contains(w.handle) { effects += state.commitWrite(w.value, at: w.handle, connection: connection) }
            await bearer.respond(.executeWriteResponse)
            report(effects, response: .executeWriteResponse, connection: connection)
            return true
        case .readByTypeRequest, .readMultipleRequest, .readMultipleVariableRequest:
            let handles = manualReads(pdu, sec)
            guard !handles.isEmpty else { return false }
            // The application's values stand in for the stored ones, each asked in turn.
            var supplied: GATTServerState.SuppliedValues = [:]
            for h in handles { supplied[h] = await ask(connection, h, .read(offset: 0)) }
            await answer(pdu, connection: connection, bearer: bearer, supplied: supplied)
            return true
        default:
            return false
        }
    }

    /// The manual handles a Read By Type, Read Multiple or Read Multiple Variable Request
    /// would read on a link with `security`, in order: none when the request is refused
    /// before it reaches one, so the application is not asked for a value no answer
    /// could carry.
    private func manualReads(_ pdu: ATTPDU, _ security: LinkSecurity) -> [UInt16] {
        switch pdu {
        case let .readByTypeRequest(s, e, type) where s != 0 && s <= e:
            var out: [UInt16] = []
            for a in state.database.attributes(in: s...e) where a.type == type {
                if state.readDenied(a, security) != nil { break }
                if manual.contains(a.handle) { out.append(a.handle) }
            }
            return out
        case let .readMultipleRequest(handles), let .readMultipleVariableRequest(handles):
            let readable = handles.allSatisfy { h in state.database.attribute(h).map { state.readDenied($0, security) == nil } ?? false }
            return readable ? handles.filter(manual.contains) : []
        default:
            return []
        }
    }

    /// Hands a Write Command on a manual handle to `requests` (nothing to answer; one
    /// the link's security does not allow is ignored, §3.4.5.3), synchronously, so
    /// commands reach the application in the order they came. False when `pdu` is not one.
    private func takeManualCommand(_ pdu: ATTPDU, connection: UInt16) -> Bool {
        guard case let .writeCommand(h, v) = pdu, manual.contains(h) else { return false }
        guard state.writeDenied(h, v, linkSecurity(connection), connection: connection) == nil else { return true }
        handOver(v, at: h, connection: connection)
        return true
    }

    /// A write that needs no answer, handed to the application as a Write Command is.
    private func handOver(_ value: [UInt8], at handle: UInt16, connection: UInt16) {
        let id = nextRequest
        nextRequest += 1
        hand(Request(id: id, connection: connection, handle: handle, kind: .write(value: value, withResponse: false)))
    }

    public var database: AttributeDatabase { state.database }

    private func handle(of type: BluetoothUUID) -> UInt16? { state.database.attributes.first { $0.type == type }?.handle }

    /// Adds a service while clients may be connected: the Database Hash is refreshed
    /// and subscribers of Service Changed get an indication of the new range.
    @discardableResult
    public func addService(_ service: GATTService) async throws -> ServiceHandles {
        let handles = try state.database.add(service)
        await databaseChanged(handles.start...handles.end)
        return handles
    }

    /// Removes the service declared at `start`; Service Changed covers its old range.
    public func removeService(at start: UInt16) async throws {
        let range = try state.database.removeService(at: start)
        await databaseChanged(range)
    }

    /// Replaces the service declared at `start` (to add or remove a characteristic or
    /// descriptor live): the new definition goes after the highest handle, and one
    /// Service Changed covers the old and the new range.
    @discardableResult
    public func replaceService(at start: UInt16, with service: GATTService) async throws -> ServiceHandles {
        var db = state.database
        let old = try db.removeService(at: start)
        let handles = try db.add(service)
        state.database = db
        await databaseChanged(Swift.min(old.lowerBound, handles.start)...Swift.max(old.upperBound, handles.end))
        return handles
    }

    /// The connections being served.
    public var connections: [UInt16] { bearers.handles }

    /// The ATT_MTU of a connection being served.
    public func mtu(connection: UInt16) async -> Int? { await bearers[connection]?.mtu }

    private func databaseChanged(_ range: ClosedRange<UInt16>) async {
        state.databaseChanged(range, connections: bearers.handles)
        guard let sc = handle(of: GATTCharacteristicType.serviceChanged) else { return }
        let hash = state.databaseHashValue
        // A confirmed Service Changed tells that client of the changes up to `hash`.
        for c in await indicate(sc, value: Self.serviceChangedValue(range)) { confirmedServiceChanged(c, hash: hash) }
    }

    /// The Service Changed characteristic's value for `range` (§7.1): start and end handle.
    static func serviceChangedValue(_ range: ClosedRange<UInt16>) -> [UInt8] {
        [UInt8(range.lowerBound & 0xFF), UInt8(range.lowerBound >> 8), UInt8(range.upperBound & 0xFF), UInt8(range.upperBound >> 8)]
    }

    private func confirmedServiceChanged(_ connection: UInt16, hash: [UInt8]?) {
        guard bearers[connection] != nil,
              state.confirmedServiceChanged(connection: connection, hash: hash, singleBearer: enhanced[connection]?.isEmpty ?? true) else { return }
        emit(.clientRecordChanged(connection: connection))
    }

    /// Serves the database on `bearer` (connection `handle`) until the bearer closes.
    /// With `readsBearer: false` someone else reads the bearer (a `GATTClient` on the
    /// same link) and hands requests and commands to `serve(_:connection:)`, and
    /// `detach(connection:)` ends the connection here.
    public func attach(_ bearer: ATTBearer, connection handle: UInt16, security: LinkSecurity = LinkSecurity(), readsBearer: Bool = true) async {
        attachShared(bearer, connection: handle, security: security)
        guard readsBearer else { return }
        if bearer.loop === loop {
            // The usual case: the bearer shares this server's loop, requests are served
            // synchronously as they arrive. The server stays alive while it serves a
            // connection: the bearer holds these closures until it closes.
            await bearer.setHandler(handler(connection: handle), closed: { self.onLoop { $0.detach(handle) } })
            await bearer.start()
            return
        }
        await bearer.start()
        let incoming = bearer.incoming
        // A bearer on another loop: served in arrival order by a task (which holds the server).
        Task {
            for await item in incoming { await self.serve(item, connection: handle) }
            self.detach(handle)
        }
    }

    /// Serves the database on `bearer` (connection `handle`), which someone else reads
    /// (a `GATTClient` on the same link hands requests and commands to
    /// `handler(connection:)`), until `detach(connection:)`: `attach` with
    /// `readsBearer: false`, synchronously (on the loop, as a link comes up).
    public func attachShared(_ bearer: ATTBearer, connection handle: UInt16, security: LinkSecurity = LinkSecurity()) {
        bearers[handle] = bearer
        self.security[handle] = security
        emit(.connected(handle))
    }

    /// Serves the database on an enhanced bearer (EATT) of `connection` as well, until
    /// that bearer closes: each request is answered on the bearer it came on (each
    /// bearer has its own transaction in flight); the connection's CCCDs, prepared
    /// writes and security are shared by all its bearers. Notifications and indications keep to the
    /// connection's unenhanced bearer.
    public func attachEnhanced(_ bearer: ATTBearer, connection handle: UInt16) async {
        guard bearers[handle] != nil else { return }
        enhanced[handle, default: []].append(bearer)
        let id = ObjectIdentifier(bearer)
        await bearer.setHandler(handler(connection: handle, on: bearer), closed: { self.onLoop { $0.detachEnhanced(id, connection: handle) } })
        await bearer.start()
    }

    private func detachEnhanced(_ id: ObjectIdentifier, connection handle: UInt16) {
        enhanced[handle]?.removeAll { ObjectIdentifier($0) == id }
        if enhanced[handle]?.isEmpty == true { enhanced[handle] = nil }
    }

    /// How many enhanced bearers (EATT) `connection` has.
    public func enhancedBearers(connection handle: UInt16) -> Int { enhanced[handle]?.count ?? 0 }

    /// The handler of `connection`'s requests and commands for a bearer read by a
    /// `GATTClient` on the same link (`GATTClient(bearer:server:)`). Called on the
    /// bearer's loop: served synchronously when that is this server's loop.
    public nonisolated func handler(connection: UInt16) -> @Sendable (ATTBearer.Incoming) -> Void {
        { item in
            if self.loop.inEventLoop {
                self.onLoop((item, connection)) { $0.serveNow($1.0, connection: $1.1) }
            } else {
                Task { await self.serve(item, connection: connection) }
            }
        }
    }

    /// The handler of requests and commands `connection`'s peer sends on `bearer`, an
    /// enhanced bearer someone else reads (a `GATTClient` that opened it,
    /// `GATTClient.addEnhancedBearer(_:server:)`): each is answered on that bearer.
    public nonisolated func handler(connection: UInt16, on bearer: ATTBearer) -> @Sendable (ATTBearer.Incoming) -> Void {
        { item in
            if self.loop.inEventLoop, bearer.loop === self.loop {
                self.onLoop((item, connection, bearer)) { $0.serveNow($1.0, connection: $1.1, on: $1.2) }
            } else {
                Task { await self.serve(item, connection: connection, on: bearer) }
            }
        }
    }

    /// Serves `item` on the loop without suspending: only requests for manual handles
    /// (answered by the application) continue in a task.
    private func serveNow(_ item: ATTBearer.Incoming, connection: UInt16, on which: ATTBearer? = nil) {
        guard let bearer = which ?? bearers[connection], bearer.loop === loop else {
            Task { await serve(item, connection: connection, on: which) }
            return
        }
        switch item {
        case let .request(pdu), let .command(pdu):
            if isManual(pdu, connection: connection) {
                // Reads and writes wait for the application's answer, in a task.
                if !takeManualCommand(pdu, connection: connection) {
                    Task {
                        // What made it manual can change before the task runs (another
                        // bearer of the link executing the queue): then it is served as any.
                        if await !serveManually(pdu, connection: connection, bearer: bearer) { await serve(item, connection: connection, on: bearer) }
                    }
                }
                return
            }
            let mtu = bearer.onLoop { $0.mtu }
            let (response, effects) = state.handle(pdu, connection: connection, mtu: mtu, security: linkSecurity(connection), singleBearer: enhanced[connection]?.isEmpty ?? true)
            if let response { bearer.onLoop { $0.respond(response) } }
            report(effects, response: response, connection: connection, pdu: pdu)
        case .notification:
            logger.debug("server ignores client notifications", metadata: ["ble.handle": "\(connection)"])
        case .indication:
            // §3.4.7.3: every indication is confirmed, even one nobody here asked for.
            bearer.onLoop { $0.confirm() }
        }
    }

    private func isManual(_ pdu: ATTPDU, connection: UInt16) -> Bool {
        guard !manual.isEmpty else { return false }
        switch pdu {
        case let .readRequest(h), let .readBlobRequest(h, _), let .writeRequest(h, _), let .writeCommand(h, _): return manual.contains(h)
        case .executeWriteRequest(flags: 1): return state.preparedHandles(connection: connection).contains(where: manual.contains)
        case .readByTypeRequest, .readMultipleRequest, .readMultipleVariableRequest:
            return !manualReads(pdu, linkSecurity(connection)).isEmpty
        default: return false
        }
    }

    private func report(_ effects: [GATTServerState.Effect], response: ATTPDU?, connection: UInt16, pdu: ATTPDU? = nil) {
        if case let .signedWriteCommand(h, _, _)? = pdu, effects.isEmpty {
            logger.debug("signed write ignored: no signing key, a signature that does not verify, or a replayed counter",
                         metadata: ["ble.handle": "\(connection)", "att.handle": "\(h)"])
        }
        if case let .errorResponse(_, h, code)? = response, code.asksForSecurity, let pdu {
            emit(.securityNeeded(connection: connection, level: state.needsAuthentication(pdu, at: h) ? .authenticated : .encrypted))
        }
        for e in effects {
            switch e {
            // A verified Signed Write Command to a manual handle goes to the application
            // as its Write Commands do.
            case let .written(h, v, c) where manual.contains(h): handOver(v, at: h, connection: c)
            case let .written(h, v, c): emit(.written(handle: h, value: v, connection: c))
            case let .subscription(h, c, n, i): emit(.subscription(valueHandle: h, connection: c, notify: n, indicate: i))
            case let .signCounter(c, counter): emit(.signCounter(connection: c, counter: counter))
            case let .clientRecordChanged(c): emit(.clientRecordChanged(connection: c))
            }
        }
    }

    /// Answers one request or command that arrived on `connection`'s bearer (for a
    /// bearer attached with `readsBearer: false`).
    public func serve(_ item: ATTBearer.Incoming, connection: UInt16) async {
        await serve(item, connection: connection, on: nil)
    }

    private func serve(_ item: ATTBearer.Incoming, connection: UInt16, on which: ATTBearer?) async {
        guard let bearer = which ?? bearers[connection] else { return }
        switch item {
        case let .request(pdu), let .command(pdu):
            if !manual.isEmpty, await serveManually(pdu, connection: connection, bearer: bearer) { return }
            await answer(pdu, connection: connection, bearer: bearer)
        case .notification:
            logger.debug("server ignores client notifications", metadata: ["ble.handle": "\(connection)"])
        case .indication:
            // §3.4.7.3: every indication is confirmed, even one nobody here asked for.
            await bearer.confirm()
        }
    }

    /// Answers `pdu` from the state, judged by the link's security at this moment.
    private func answer(_ pdu: ATTPDU, connection: UInt16, bearer: ATTBearer, supplied: GATTServerState.SuppliedValues = [:]) async {
        let mtu = await bearer.mtu
        let (response, effects) = state.handle(pdu, connection: connection, mtu: mtu, security: linkSecurity(connection), supplied: supplied,
                                                singleBearer: enhanced[connection]?.isEmpty ?? true)
        if let response { await bearer.respond(response) }
        report(effects, response: response, connection: connection, pdu: pdu)
    }

    /// Reads a link's security where the Security Manager keeps it, synchronously on the
    /// loop, as each request is judged: a request that arrives right after the link's
    /// Encryption Change is judged by the new security, with no event in between (nil
    /// from `source`: what `setSecurity` gave).
    public func setSecuritySource(_ source: @escaping @Sendable (UInt16) -> LinkSecurity?) { securitySource = source }

    private func linkSecurity(_ connection: UInt16) -> LinkSecurity {
        securitySource?(connection) ?? security[connection] ?? LinkSecurity()
    }

    /// What the link now has (after pairing or encryption): later requests are checked
    /// against it.
    public func setSecurity(_ s: LinkSecurity, connection handle: UInt16) {
        guard bearers[handle] != nil else { return }
        security[handle] = s
    }

    /// The key `connection`'s Signed Write Commands are verified with: its bonded
    /// client's CSRK and last SignCounter (nil: they are ignored).
    public func setSigningKey(_ key: SigningKey?, connection handle: UInt16) {
        guard bearers[handle] != nil else { return }
        state.setSigningKey(key, connection: handle)
    }

    /// What a bond keeps of `connection`'s client (`GATTServerState.ClientRecord`).
    public func clientRecord(connection handle: UInt16) -> GATTServerState.ClientRecord {
        state.clientRecord(connection: handle)
    }

    /// Puts back what a bond kept of a client, once its link is encrypted with the
    /// bond's key: its CCCD values (reported as `restoreClientConfigurations` reports
    /// them), its Client Supported Features, and whether it is change-aware. When the
    /// Database Hash it was aware of is not ours now, the database changed while it was
    /// away: with robust caching it is change-unaware (§2.5.2.1), and with Service
    /// Changed indications on it is told so at once (§7.1), for the handles changed
    /// since that database (`GATTServerState.changes(since:)`; 0x0001–0xFFFF when this
    /// server does not know it), and has taken the change in once it confirms. A record
    /// from before hashes were kept (`awareOfHash` nil) is taken as aware.
    public func restoreClient(_ record: GATTServerState.ClientRecord, connection handle: UInt16) {
        guard let bearer = bearers[handle] else { return }
        report(state.restoreClientConfigurations(record.configurations, connection: handle), response: nil, connection: handle)
        state.restoreClientFeatures(record.supportedFeatures, connection: handle)
        guard let current = state.databaseHashValue, let known = record.awareOfHash, known != current else {
            // Unchanged (or nothing to compare): the bond learns the hash it is aware of.
            if state.databaseHashValue != nil, record.awareOfHash != state.databaseHashValue {
                emit(.clientRecordChanged(connection: handle))
            }
            return
        }
        let range = state.changedWhileAway(connection: handle, known: known)
        guard let sc = self.handle(of: GATTCharacteristicType.serviceChanged), state.configuration(valueHandle: sc, connection: handle).indicate else {
            logger.debug("database changed while a bonded client was away; it has no Service Changed indications",
                         metadata: ["ble.handle": "\(handle)", "gatt.change_aware": "\(state.isChangeAware(handle))"])
            return
        }
        let value = Self.serviceChangedValue(range)
        // Queued now when the bearer shares the server's loop (it does on a host), so it
        // goes out before anything the server answers next.
        let queued = bearer.loop.inEventLoop ? bearer.onLoop { $0.startIndication(handle: sc, value: value) } : nil
        let logger = self.logger
        // Confirmed within the bearer's transaction timeout, or failed with the link.
        Task { [weak self] in
            do {
                let confirmation = if let queued { queued } else { await bearer.startIndication(handle: sc, value: value) }
                try await confirmation()
                await self?.confirmedServiceChanged(handle, hash: current)
            } catch {
                logger.debug("Service Changed at reconnection not confirmed", metadata: ["ble.handle": "\(handle)", "error": "\(error)"])
            }
        }
    }

    /// The CCCD values `connection` has set (by CCCD handle, zeros left out).
    public func clientConfigurations(connection handle: UInt16) -> [UInt16: UInt16] {
        state.clientConfigurations(connection: handle)
    }

    /// The characteristics `connection` is subscribed to (see
    /// `GATTServerState.subscriptions(connection:)`).
    public func subscriptions(connection handle: UInt16) -> [(valueHandle: UInt16, notify: Bool, indicate: Bool)] {
        state.subscriptions(connection: handle)
    }

    /// Puts back a bonded client's CCCD values on `connection` (see
    /// `GATTServerState.restoreClientConfigurations`); each change is reported as a
    /// `subscription` event, as a write would be.
    public func restoreClientConfigurations(_ values: [UInt16: UInt16], connection handle: UInt16) {
        guard bearers[handle] != nil else { return }
        report(state.restoreClientConfigurations(values, connection: handle), response: nil, connection: handle)
    }

    /// The connection's bearer is gone: forget what it set. Safe to call more than once.
    public func detach(connection handle: UInt16) { detach(handle) }

    private func detach(_ handle: UInt16) {
        guard bearers[handle] != nil else { return }
        bearers[handle] = nil
        enhanced[handle] = nil
        security[handle] = nil
        state.disconnected(handle)
        emit(.disconnected(handle))
    }

    /// Sets a value; subscribers are told with `notify(_:value:)` / `indicate(_:value:)`.
    public func setValue(_ value: [UInt8], at handle: UInt16) { state.database.setValue(value, at: handle) }

    /// Stores `value` and notifies every connection subscribed to notifications
    /// (truncated to ATT_MTU - 3). Returns the connections notified.
    /// Connections whose bearer is writable get theirs first; then, for each one that
    /// has fallen behind (`ATTBearer.isWritable`), this waits until it has room: a
    /// caller notifying in a loop is paced by its slowest subscriber, as CoreBluetooth's
    /// `updateValue` is, and nothing queues without bound.
    /// With `waitUntilSent`, returns once every notification is in the controller's
    /// buffers.
    /// `only` limits the notification to those connections (the value is stored either way).
    /// `store: false` sends without changing what reads return (a transfer in pieces).
    @discardableResult
    public func notify(_ valueHandle: UInt16, value: [UInt8], waitUntilSent: Bool = false, only: Set<UInt16>? = nil, store: Bool = true) async -> [UInt16] {
        if store { state.database.setValue(value, at: valueHandle) }
        // Connection order; `sent` in that order is already sorted. The bearers' table
        // keeps its handles sorted, so a notification allocates only what it returns.
        var sent: [UInt16] = []
        var behind: [UInt16] = []
        // §2.5.2.1: nothing is notified to a change-unaware client.
        for c in bearers.handles
        where state.configuration(valueHandle: valueHandle, connection: c).notify && only?.contains(c) != false && state.isChangeAware(c) {
            guard let bearer = bearers[c] else { continue }
            // nil: not writable now, served after the others.
            let outcome: Bool? = await with(bearer, (valueHandle, value)) { b, a in
                b.isWritable ? (try? b.notify(handle: a.0, value: a.1)) != nil : nil
            }
            switch outcome {
            case true?: sent.append(c)
            case nil: behind.append(c)
            case false?: break
            }
        }
        for c in behind {
            guard let bearer = bearers[c] else { continue }
            await writable(bearer)
            if (try? await with(bearer, (valueHandle, value), { try $0.notify(handle: $1.0, value: $1.1) })) != nil {
                sent.append(c)
            }
        }
        if !behind.isEmpty { sent.sort() }
        // Checked here first: a call to `drain` costs two executor checks (its entry
        // and the return) even when it does not suspend, a tenth of a notification's
        // CPU on the virtual radio.
        if waitUntilSent, !drained(sent) { await drain(sent) }
        return sent
    }

    /// Whether the bearer of each of `connections` still served, on this loop, has
    /// handed everything queued to its link (false: `drain` must wait, or hop).
    private func drained(_ connections: [UInt16]) -> Bool {
        for c in connections {
            guard let b = bearers[c] else { continue }
            guard b.loop === loop, b.onLoop({ $0.isDrained }) else { return false }
        }
        return true
    }

    /// Runs `body` on `bearer`: synchronously when it shares this server's loop (every
    /// bearer of the server's own host does), so a notification handed to a link with
    /// room in the controller's buffers never suspends; otherwise by a hop to it.
    @inline(__always)  // as `onLoop` is: `body` reaches it as the closure written at the call
    private func with<T: Sendable>(_ bearer: ATTBearer, _ body: @Sendable (isolated ATTBearer) throws -> T) async rethrows -> T {
        if bearer.loop === loop { return try bearer.onLoop(body) }
        return try await bearer.perform(body)
    }

    /// `with(_:_:)` with what `body` needs passed in (no closure context to allocate).
    @inline(__always)
    private func with<Argument: Sendable, T: Sendable>(
        _ bearer: ATTBearer, _ argument: Argument, _ body: @Sendable (isolated ATTBearer, Argument) throws -> T
    ) async rethrows -> T {
        if bearer.loop === loop { return try bearer.onLoop(argument, body) }
        return try await bearer.perform { try body($0, argument) }
    }

    /// Returns once the bearer of each of `connections` still served has handed
    /// everything queued to its link.
    private func drain(_ connections: [UInt16]) async {
        for c in connections {
            guard let b = bearers[c] else { continue }
            if b.loop === loop {
                // Registered with the bearer synchronously: the wait costs this task one
                // resumption on the loop, not a hop to the bearer's actor and one back.
                if b.onLoop({ $0.isDrained }) { continue }
                await withCheckedContinuation { waiter in b.onLoop(waiter) { $0.whenDrained($1) } }
            } else {
                await b.drain()
            }
        }
    }

    /// Waits until `bearer` has room, as `drain(_:)` waits for it to empty.
    private func writable(_ bearer: ATTBearer) async {
        if bearer.loop === loop {
            if bearer.onLoop({ $0.isWritable }) { return }
            await withCheckedContinuation { waiter in bearer.onLoop(waiter) { $0.whenWritable($1) } }
        } else {
            await bearer.writable()
        }
    }

    /// Stores each value and notifies every connection subscribed to notifications of
    /// any of them (Vol 3, Part G, §4.10.2). A client whose Client Supported Features
    /// asks for Multiple Handle Value Notifications (bit 2) gets the values it is
    /// subscribed to packed into as few of those PDUs as its ATT_MTU allows (a value
    /// that does not fit with another goes alone as a Handle Value Notification,
    /// truncated to ATT_MTU - 3); any other client gets one notification per value.
    /// Values go in the order given. Returns the connections notified; with
    /// `waitUntilSent`, returns once every PDU is in the controller's buffers.
    @discardableResult
    public func notify(multiple values: [(handle: UInt16, value: [UInt8])], waitUntilSent: Bool = false, only: Set<UInt16>? = nil) async -> [UInt16] {
        for (h, v) in values { state.database.setValue(v, at: h) }
        var sent: [UInt16] = []
        for c in bearers.handles where only?.contains(c) != false && state.isChangeAware(c) {
            guard let bearer = bearers[c] else { continue }
            let wanted = values.filter { state.configuration(valueHandle: $0.handle, connection: c).notify }
            guard !wanted.isEmpty else { continue }
            let mtu = await with(bearer) { $0.mtu }
            let pdus = state.clientSupportedFeatures(connection: c) & ClientSupportedFeatures.multipleHandleValueNotifications != 0
                ? GATTServerState.packNotifications(wanted, mtu: mtu)
                : wanted.map { ATTPDU.handleValueNotification(handle: $0.handle, value: Array($0.value.prefix(mtu - 3))) }
            var ok = true
            for pdu in pdus {
                // Waits for room as `notify` does (on this server's loop, no hop to the
                // bearer), then hands the PDU over synchronously.
                await writable(bearer)
                if (try? await with(bearer, pdu, { try $0.sendUnacknowledged($1) })) == nil { ok = false; break }
            }
            if ok { sent.append(c) }
        }
        if waitUntilSent, !drained(sent) { await drain(sent) }
        return sent
    }

    /// What `connection`'s client wrote to Client Supported Features (Vol 3, Part G, §7.2).
    public func clientSupportedFeatures(connection: UInt16) -> UInt8 { state.clientSupportedFeatures(connection: connection) }

    /// What `connection` has set in the Client Characteristic Configuration of `valueHandle`.
    public func configuration(valueHandle: UInt16, connection: UInt16) -> (notify: Bool, indicate: Bool) {
        state.configuration(valueHandle: valueHandle, connection: connection)
    }

    /// Stores `value` and indicates it to every connection subscribed to indications,
    /// returning when all have confirmed (or failed). Returns the connections that confirmed.
    /// Each connection's bearer queues its own indications: one that never confirms
    /// (until its 30 s transaction timeout) delays no other connection.
    @discardableResult
    public func indicate(_ valueHandle: UInt16, value: [UInt8]) async -> [UInt16] {
        state.database.setValue(value, at: valueHandle)
        // §2.5.2.1: a change-unaware client is sent no indication but Service Changed.
        let serviceChanged = handle(of: GATTCharacteristicType.serviceChanged)
        let targets = bearers.handles.filter {
            state.configuration(valueHandle: valueHandle, connection: $0).indicate && (valueHandle == serviceChanged || state.isChangeAware($0))
        }.compactMap { c in
            bearers[c].map { (c, $0) }
        }
        let logger = self.logger
        // Every indication is handed to its bearer, in connection order, before any confirmation is awaited.
        var sent: [(UInt16, Task<Bool, Never>)] = []
        for (c, b) in targets {
            let mtu = await b.mtu
            let confirmation = await b.startIndication(handle: valueHandle, value: Array(value.prefix(mtu - 3)))
            sent.append((c, Task {
                do { try await confirmation(); return true } catch {
                    logger.debug("indication failed", metadata: ["ble.handle": "\(c)", "error": "\(error)"])
                    return false
                }
            }))
        }
        var confirmed: [UInt16] = []
        for (c, t) in sent where await t.value { confirmed.append(c) }
        return confirmed
    }
}

/// The bearers a server serves, by connection handle, with the handles kept sorted:
/// notifying walks connections in order without sorting (or allocating) each time.
private struct BearerTable {
    private var byHandle: [UInt16: ATTBearer] = [:]
    /// The connection handles, ascending.
    private(set) var handles: [UInt16] = []

    subscript(handle: UInt16) -> ATTBearer? {
        get { byHandle[handle] }
        set {
            let old = newValue.map { byHandle.updateValue($0, forKey: handle) } ?? byHandle.removeValue(forKey: handle)
            switch (old, newValue) {
            case (nil, _?): handles.insert(handle, at: handles.firstIndex { $0 > handle } ?? handles.endIndex)
            case (_?, nil): handles.removeAll { $0 == handle }
            default: break
            }
        }
    }
}
