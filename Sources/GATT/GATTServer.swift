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
    @exclusivity(unchecked) var state: GATTServerState
    /// The bearer of each connection, by handle: notifying walks the connections in
    /// handle order (`bearers.keys`) without sorting or allocating each time.
    @exclusivity(unchecked) var bearers = HandleMap<ATTBearer>()
    /// Each connection's enhanced bearers (EATT), beside its unenhanced one.
    private var enhanced: [UInt16: [ATTBearer]] = [:]
    private var security: [UInt16: LinkSecurity] = [:]
    /// Where a link's security is read at the moment a request is judged (the Security
    /// Manager's own record, on the same loop), before `security`.
    private var securitySource: (@Sendable (UInt16) -> LinkSecurity?)?
    let logger: Logger
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

    let requestContinuation: BufferedStream<Request>.Continuation
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
    var requestHandler: (@Sendable (Request) -> Void)?

    var manual: Set<UInt16> = []
    var pending: [UInt64: CheckedContinuation<Result<[UInt8], ATTErrorCode>, Never>] = [:]
    var nextRequest: UInt64 = 1
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

    public var database: AttributeDatabase { state.database }

    func handle(of type: BluetoothUUID) -> UInt16? { state.database.attributes.first { $0.type == type }?.handle }

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
    public var connections: [UInt16] { bearers.keys }

    /// The ATT_MTU of a connection being served.
    public func mtu(connection: UInt16) async -> Int? { await bearers[connection]?.mtu }

    private func databaseChanged(_ range: ClosedRange<UInt16>) async {
        state.databaseChanged(range, connections: bearers.keys)
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

    func report(_ effects: [GATTServerState.Effect], response: ATTPDU?, connection: UInt16, pdu: ATTPDU? = nil) {
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
    func answer(_ pdu: ATTPDU, connection: UInt16, bearer: ATTBearer, supplied: GATTServerState.SuppliedValues = [:]) async {
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

    func linkSecurity(_ connection: UInt16) -> LinkSecurity {
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

}

