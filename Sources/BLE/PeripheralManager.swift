// The peripheral role of the facade: the local GATT server's services,
// characteristics and descriptors added and removed live (FA06–FA08), notifications
// and indications (FA09), writes and subscriptions as events, and manual answering
// of reads and writes. Advertising (FA05) is in Advertising.swift.
//
// Services, characteristics and descriptors are definitions with identity (final
// classes): the same object names the published thing when removing it, notifying
// or matching a request. What is published where is the host's business: adding a
// characteristic or descriptor to a published service re-publishes that service
// (Service Changed tells connected clients), so its handles may move.

import ATT
import GAP
import GATT
import HCI

public final class Descriptor: Sendable, Hashable {
    public let uuid: BluetoothUUID
    public let permissions: AttributePermissions
    public let value: [UInt8]
    public init(uuid: BluetoothUUID, value: [UInt8] = [], permissions: AttributePermissions = .read) {
        self.uuid = uuid
        self.value = value
        self.permissions = permissions
    }
    /// Characteristic User Description (0x2901).
    public static func userDescription(_ text: String) -> Descriptor { Descriptor(uuid: GATTType.userDescription, value: Array(text.utf8)) }
    public static func == (a: Descriptor, b: Descriptor) -> Bool { a === b }
    public func hash(into h: inout Hasher) { h.combine(ObjectIdentifier(self)) }
    var definition: GATTDescriptor { GATTDescriptor(uuid: uuid, permissions: permissions, value: value) }
}

public final class Characteristic: Sendable, Hashable {
    public let uuid: BluetoothUUID
    public let properties: CharacteristicProperties
    public let permissions: AttributePermissions?
    /// The value when published; later values are set with `PeripheralManager.setValue`.
    public let initialValue: [UInt8]
    public let maximumLength: Int
    /// Descriptors given at creation (the CCCD is added by itself for notify/indicate).
    public let descriptors: [Descriptor]
    /// Reads and writes go to `PeripheralManager.requests()` to be answered by the app.
    public let answersManually: Bool
    public init(uuid: BluetoothUUID, properties: CharacteristicProperties, permissions: AttributePermissions? = nil,
                value: [UInt8] = [], maximumLength: Int = 512, descriptors: [Descriptor] = [], answersManually: Bool = false) {
        self.uuid = uuid
        self.properties = properties
        self.permissions = permissions
        self.initialValue = value
        self.maximumLength = maximumLength
        self.descriptors = descriptors
        self.answersManually = answersManually
    }
    public static func == (a: Characteristic, b: Characteristic) -> Bool { a === b }
    public func hash(into h: inout Hasher) { h.combine(ObjectIdentifier(self)) }
}

public final class Service: Sendable, Hashable {
    public let uuid: BluetoothUUID
    public let isPrimary: Bool
    /// Services this one includes (typically secondary ones); published with it when
    /// not published already, and removed with it when nothing else includes them.
    public let includedServices: [Service]
    public let characteristics: [Characteristic]
    public init(uuid: BluetoothUUID, isPrimary: Bool = true, includedServices: [Service] = [], characteristics: [Characteristic] = []) {
        self.uuid = uuid
        self.isPrimary = isPrimary
        self.includedServices = includedServices
        self.characteristics = characteristics
    }
    public static func == (a: Service, b: Service) -> Bool { a === b }
    public func hash(into h: inout Hasher) { h.combine(ObjectIdentifier(self)) }
}

/// A service as it is published now.
struct PublishedService {
    var service: Service
    var characteristics: [Characteristic]
    var descriptors: [ObjectIdentifier: [Descriptor]]
    var handles: ServiceHandles
    /// Published only because a published service includes it.
    var implicit: Bool

    func index(of c: Characteristic) -> Int? { characteristics.firstIndex { $0 === c } }

    /// The handle of descriptor `j` of characteristic `i` (they follow the value and the CCCD).
    func descriptorHandle(_ i: Int, _ j: Int) -> UInt16 {
        (handles.clientConfigurations[i] ?? handles.characteristicValues[i]) + 1 + UInt16(j)
    }
}

/// What centrals did to the local server.
public enum PeripheralEvent: Hashable, Sendable {
    /// A central wrote a characteristic value (not one answered manually).
    case written(Characteristic, value: [UInt8], central: Connection)
    /// A central wrote a descriptor.
    case descriptorWritten(Descriptor, value: [UInt8], central: Connection)
    /// A central changed its Client Characteristic Configuration, or its link ended
    /// while it was subscribed (then `notify` and `indicate` are both false, as
    /// CoreBluetooth's `didUnsubscribeFrom` comes on a disconnection; a bonded central's
    /// values stay with its bond and come back, reported again, when a later link is
    /// encrypted with its key).
    case subscriptionChanged(Characteristic, central: Connection, notify: Bool, indicate: Bool)
    /// An advertisement given a `duration` or `maximumEvents` reached it and stopped:
    /// set 0 is `startAdvertising`'s. It stays configured (an added set keeps its handle,
    /// listed in `advertisingSets`) but off air until started or updated again; a link
    /// it made earlier is not affected.
    case advertisingEnded(AdvertisingSet, reason: AdvertisingEndReason)
    /// A central connected to an advertising set (set 0 is `startAdvertising`'s): LE
    /// Advertising Set Terminated names the set, or with the legacy commands set 0 is
    /// the only one (as Zephyr's per-set `connected` callback and NimBLE's
    /// advertising-complete event tell). The controller stopped the set for the link;
    /// the host starts it again when the link ends. Comes once the host knows the link
    /// (`ConnectionEvent.connected`).
    case advertisingConnected(AdvertisingSet, central: Connection)
}

/// A read or write of a characteristic created with `answersManually`. Answer every
/// request once: the central waits (ATT allows it one request at a time); after 20 s
/// the server answers Unlikely Error itself. Write Commands need no answer.
///
/// Every way a central reads or writes the value comes here, each after the server has
/// checked the link's security and the permissions:
/// - Read and Read Blob: `.read(offset:)`; Read By Type, Read Multiple and Read Multiple
///   Variable: `.read(offset: 0)` (the server cuts the value to what the response holds);
/// - Write Request: `.write(withResponse: true)`; Write Command and a verified Signed
///   Write Command: `.write(withResponse: false)`;
/// - a long or reliable write (Prepare Write, then Execute Write): one
///   `.write(withResponse: true)` with the whole value when the central executes it, its
///   length already checked. Refusing it refuses the whole Execute Write; the queue's
///   other values are written only once every manual one in it is accepted.
public struct ReadWriteRequest: Sendable {
    public enum Kind: Hashable, Sendable {
        /// Answer with the whole value; the server applies `offset` and the MTU.
        case read(offset: Int)
        case write(value: [UInt8], withResponse: Bool)
    }
    public let characteristic: Characteristic
    public let central: Connection
    public let kind: Kind
    let id: UInt64
    let server: GATTServer

    /// Answers a read with the value, or accepts a write.
    public func respond(with value: [UInt8] = []) async { await server.respond(to: id, with: .success(value)) }
    /// Refuses with an ATT error (Read Not Permitted, Value Not Allowed, an application error 0x80–0x9F...).
    public func respond(error: ATTErrorCode) async { await server.respond(to: id, with: .failure(error)) }
}

public struct PeripheralManager: Sendable {
    public let host: BluetoothHost

    // MARK: FA06–FA08

    /// Publishes a service (and the services it includes that are not published yet).
    public func add(_ service: Service) async throws { try await host.publish(service, implicit: false) }

    /// Removes a published service, and services published only because it included them.
    public func remove(_ service: Service) async throws { try await host.unpublish(service) }

    /// Adds a characteristic to a published service (it becomes visible at once).
    public func add(_ c: Characteristic, to service: Service) async throws { try await host.edit(service) { $0.characteristics.append(c) } }

    public func remove(_ c: Characteristic) async throws {
        let s = try await host.service(containing: c)
        try await host.edit(s) { p in
            p.characteristics.removeAll { $0 === c }
            p.descriptors[ObjectIdentifier(c)] = nil
        }
    }

    public func add(_ d: Descriptor, to c: Characteristic) async throws {
        let s = try await host.service(containing: c)
        try await host.edit(s) { $0.descriptors[ObjectIdentifier(c), default: c.descriptors].append(d) }
    }

    public func remove(_ d: Descriptor) async throws {
        let (s, c) = try await host.characteristic(containing: d)
        try await host.edit(s) { $0.descriptors[ObjectIdentifier(c), default: c.descriptors].removeAll { $0 === d } }
    }

    /// The services published now, in handle order (included services too).
    public var services: [Service] { get async { await host.peripheralState.published.values.sorted { $0.handles.start < $1.handles.start }.map(\.service) } }

    /// The characteristics of a published service as they are now.
    public func characteristics(of s: Service) async throws -> [Characteristic] { try await host.entry(s).characteristics }

    /// The descriptors of a published characteristic as they are now (without the CCCD).
    public func descriptors(of c: Characteristic) async throws -> [Descriptor] {
        let e = try await host.entry(try await host.service(containing: c))
        return e.descriptors[ObjectIdentifier(c)] ?? c.descriptors
    }

    /// Handles of a published characteristic: value and CCCD.
    public func handles(of c: Characteristic) async throws -> (value: UInt16, clientConfiguration: UInt16?) {
        try await host.handles(of: c)
    }

    /// The handle of a published descriptor.
    public func handle(of d: Descriptor) async throws -> UInt16 { try await host.handle(of: d) }

    // MARK: Values, FA09

    /// Sets the value reads return (no notification).
    public func setValue(_ value: [UInt8], of c: Characteristic) async throws {
        let h = try await host.handles(of: c).value
        await host.server.setValue(value, at: h)
    }

    public func value(of c: Characteristic) async throws -> [UInt8] {
        let h = try await host.handles(of: c).value
        return await host.server.database.attribute(h)?.value ?? []
    }

    /// Stores the value and notifies every central subscribed (each gets at most
    /// ATT_MTU − 3 bytes; see `maximumUpdateLength`). Returns once the notifications
    /// are in the controller's buffers (backpressure); returns the centrals notified.
    /// `to` limits it to some centrals; `storeValue: false` leaves what reads return
    /// alone (both for a transfer in pieces, each sized to one central's MTU).
    @discardableResult
    public func notify(_ c: Characteristic, value: [UInt8], to centrals: [Connection]? = nil, storeValue: Bool = true) async throws -> [Connection] {
        try await onLoop {
            let only = centrals.map { Set($0.map(\.handle)) }
            return await host.connections(try await host.notify(c, value: value, only: only, store: storeValue))
        }
    }

    /// A writer for `c`'s notifications from a task off the host's loop (a plain task
    /// on the cooperative pool): `send` queues each value and returns, suspending only
    /// while `capacity` values wait, and a task on the loop notifies them in order as
    /// `notify` does. Here each `notify` from such a task goes to the loop and back, two
    /// thread wake-ups a value; with the writer the two threads wake once per batch
    /// (docs/benchmarks.md, part 1a). It does not say who got each value: use `notify`
    /// for that. `to` and `storeValue` as for `notify`. Throws `BLEError.notPublished`
    /// when `c` is not published, `invalidArgument` for a capacity below 1, and
    /// `transportClosed` once the transport has ended.
    public func notificationWriter(for c: Characteristic, to centrals: [Connection]? = nil, capacity: Int = 64,
                                   storeValue: Bool = true) async throws -> NotificationWriter {
        let writer = try NotificationWriter(host: host, characteristic: c, only: centrals.map { Set($0.map(\.handle)) }, capacity: capacity, store: storeValue)
        try await host.adopt(writer)
        return writer
    }

    /// Stores several values and notifies each central subscribed to any of them; a
    /// central whose client takes Multiple Handle Value Notifications (it says so in
    /// Client Supported Features, as this stack's client does when it opens enhanced
    /// bearers) gets them packed into as few PDUs as its ATT_MTU allows
    /// (`GATTServer.notify(multiple:waitUntilSent:only:)`), any other one notification
    /// per value. Returns once all are in the controller's buffers, with the centrals notified.
    @discardableResult
    public func notify(_ values: [(Characteristic, [UInt8])], to centrals: [Connection]? = nil) async throws -> [Connection] {
        try await onLoop {
            var resolved: [(handle: UInt16, value: [UInt8])] = []
            for (c, v) in values { resolved.append((try await host.handles(of: c).value, v)) }
            let only = centrals.map { Set($0.map(\.handle)) }
            return await host.connections(await host.server.notify(multiple: resolved, waitUntilSent: true, only: only))
        }
    }

    /// Stores the value and indicates it to every central subscribed; returns when all
    /// have confirmed (or their links failed), with the centrals that confirmed.
    @discardableResult
    public func indicate(_ c: Characteristic, value: [UInt8]) async throws -> [Connection] {
        try await onLoop {
            let h = try await host.handles(of: c).value
            return await host.connections(await host.server.indicate(h, value: value))
        }
    }

    /// Runs `body` in a task that prefers the host's loop: the waits inside resume on
    /// the loop and go on there, and the caller's executor sees the task once, when
    /// `body` returns (see TheRuntime.md).
    private func onLoop<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        let loop = host.taskExecutor
        let preferred = withUnsafeCurrentTask { $0?.unownedTaskExecutor == loop.asUnownedTaskExecutor() }
        if preferred { return try await body() }
        return try await withTaskExecutorPreference(loop, operation: body)
    }

    /// The most a notification or indication to `central` carries (ATT_MTU − 3).
    public func maximumUpdateLength(for central: Connection) async -> Int { (await host.server.mtu(connection: central.handle) ?? 23) - 3 }

    /// The centrals subscribed to `c` now, with what they asked for.
    public func subscribers(of c: Characteristic) async throws -> [(central: Connection, notify: Bool, indicate: Bool)] {
        let h = try await host.handles(of: c).value
        var out: [(Connection, Bool, Bool)] = []
        for conn in await host.connections where conn.role == .peripheral {
            let cfg = await host.server.configuration(valueHandle: h, connection: conn.handle)
            if cfg.notify || cfg.indicate { out.append((conn, cfg.notify, cfg.indicate)) }
        }
        return out
    }

    // MARK: Events and manual answers

    /// Writes and subscription changes by centrals. Buffer: the newest 256.
    public func events() -> BufferedStream<PeripheralEvent> {
        host.peripheralBroadcast.subscribe(capacity: 256)
    }

    /// Reads and writes of characteristics created with `answersManually`, for the app
    /// to answer. One consumer: a second call ends the first stream. Buffer: the oldest
    /// 256 unanswered (a central has at most one request outstanding); beyond that
    /// (counted in `dropped`), and without a consumer, the server answers from the
    /// stored value. The stream finishes when the transport ends (at once when asked
    /// for after that).
    public func requests() async -> BufferedStream<ReadWriteRequest> { await host.takeRequests() }
}

extension BluetoothHost {
    func entry(_ s: Service) throws -> PublishedService {
        guard let e = peripheralState.published[ObjectIdentifier(s)] else { throw BLEError.notPublished("service \(s.uuid)") }
        return e
    }

    func service(containing c: Characteristic) throws -> Service {
        guard let e = peripheralState.published.values.first(where: { $0.index(of: c) != nil }) else { throw BLEError.notPublished("characteristic \(c.uuid)") }
        return e.service
    }

    func characteristic(containing d: Descriptor) throws -> (Service, Characteristic) {
        for e in peripheralState.published.values {
            for c in e.characteristics where (e.descriptors[ObjectIdentifier(c)] ?? c.descriptors).contains(where: { $0 === d }) { return (e.service, c) }
        }
        throw BLEError.notPublished("descriptor \(d.uuid)")
    }

    func handle(of d: Descriptor) throws -> UInt16 {
        for e in peripheralState.published.values {
            for (i, c) in e.characteristics.enumerated() {
                if let j = (e.descriptors[ObjectIdentifier(c)] ?? c.descriptors).firstIndex(where: { $0 === d }) { return e.descriptorHandle(i, j) }
            }
        }
        throw BLEError.notPublished("descriptor \(d.uuid)")
    }

    func handles(of c: Characteristic) throws -> (value: UInt16, clientConfiguration: UInt16?) {
        for e in peripheralState.published.values {
            if let i = e.index(of: c) { return (e.handles.characteristicValues[i], e.handles.clientConfigurations[i]) }
        }
        throw BLEError.notPublished("characteristic \(c.uuid)")
    }

    func connections(_ handles: [UInt16]) -> [Connection] { handles.compactMap { links.active[$0] } }

    /// Checks that `writer`'s characteristic is published and that the transport is
    /// open, and keeps the writer (weakly) to fail it when the transport ends.
    func adopt(_ writer: NotificationWriter) throws {
        _ = try handles(of: writer.characteristic)
        if case let .transportClosed(why) = state { throw BLEError.transportClosed(why) }
        peripheralState.writers = peripheralState.writers.filter { $0.value.writer != nil }
        peripheralState.writers[ObjectIdentifier(writer)] = WeakWriter(writer: writer)
    }

    /// Stores `value` in `c` (unless `store` is false) and notifies the centrals
    /// subscribed to it (those in `only`), returning once each notification is in the
    /// controller's buffers, with the links notified: `PeripheralManager.notify` and a
    /// `NotificationWriter`'s task. `failWithTheHost`: throws when the host failed or
    /// its transport closed (a writer ends then; `notify` notifies nobody).
    func notify(_ c: Characteristic, value: [UInt8], only: Set<UInt16>?, store: Bool, failWithTheHost: Bool = false) async throws -> [UInt16] {
        if failWithTheHost {
            switch state {
            case let .transportClosed(why): throw BLEError.transportClosed(why)
            case .failed: throw BLEError.notReady(state)
            default: break
            }
        }
        let h = try handles(of: c).value
        return await server.notify(h, value: value, waitUntilSent: true, only: only, store: store)
    }

    private func definition(_ e: PublishedService) throws -> GATTService {
        let includes = try e.service.includedServices.map { try entry($0).handles.start }
        return GATTService(uuid: e.service.uuid, isPrimary: e.service.isPrimary, includes: includes, characteristics: e.characteristics.map { c in
            GATTCharacteristic(uuid: c.uuid, properties: c.properties, permissions: c.permissions, value: c.initialValue,
                               maximumLength: c.maximumLength, descriptors: (e.descriptors[ObjectIdentifier(c)] ?? c.descriptors).map(\.definition))
        })
    }

    func publish(_ s: Service, implicit: Bool) async throws {
        if let e = peripheralState.published[ObjectIdentifier(s)] {
            // Asked for explicitly now: it stays when its includer goes.
            if !implicit { peripheralState.published[ObjectIdentifier(s)]?.implicit = false }
            _ = e
            return
        }
        for inc in s.includedServices { try await publish(inc, implicit: true) }
        var e = PublishedService(service: s, characteristics: s.characteristics, descriptors: [:],
                                 handles: ServiceHandles(start: 0, end: 0, characteristicValues: [], clientConfigurations: []), implicit: implicit)
        e.handles = try await server.addService(try definition(e))
        peripheralState.published[ObjectIdentifier(s)] = e
        await updateManual()
    }

    func unpublish(_ s: Service) async throws {
        let e = try entry(s)
        if let includer = peripheralState.published.values.first(where: { $0.service.includedServices.contains { $0 === s } }) {
            throw BLEError.notSupported("service \(s.uuid) is included by published service \(includer.service.uuid); remove that first")
        }
        try await server.removeService(at: e.handles.start)
        peripheralState.published[ObjectIdentifier(s)] = nil
        for inc in s.includedServices {
            guard let ie = peripheralState.published[ObjectIdentifier(inc)], ie.implicit else { continue }
            if !peripheralState.published.values.contains(where: { $0.service.includedServices.contains { $0 === inc } }) { try await unpublish(inc) }
        }
        await updateManual()
    }

    /// Changes a published service's contents and re-publishes it (one Service Changed),
    /// then the services that include it, whose Include declarations point at it.
    func edit(_ s: Service, _ change: (inout PublishedService) -> Void) async throws {
        var e = try entry(s)
        change(&e)
        try await republish(e)
        await updateManual()
    }

    private func republish(_ e: PublishedService) async throws {
        var e = e
        e.handles = try await server.replaceService(at: e.handles.start, with: try definition(e))
        peripheralState.published[ObjectIdentifier(e.service)] = e
        for inc in peripheralState.published.values where inc.service.includedServices.contains(where: { $0 === e.service }) {
            try await republish(inc)
        }
    }

    private func updateManual() async {
        var handles: Set<UInt16> = []
        for e in peripheralState.published.values {
            for (i, c) in e.characteristics.enumerated() where c.answersManually { handles.insert(e.handles.characteristicValues[i]) }
        }
        await server.setManual(handles)
    }

    func takeRequests() -> BufferedStream<ReadWriteRequest> {
        peripheralState.requestContinuation?.finish()
        let (s, c) = BufferedStream<ReadWriteRequest>.makeStream(capacity: 256, keeping: .oldest)
        // No request comes once the transport has ended: the stream is over already.
        if case .transportClosed = state {
            c.finish()
            return s
        }
        peripheralState.requestGeneration += 1
        let generation = peripheralState.requestGeneration
        peripheralState.requestContinuation = c
        // Queued in order with the program's other let-go work (`owe`), so the stored
        // values answer from the program's next operation on, the same way every run.
        c.onTermination = { [weak self] termination in
            guard let host = self else { return }
            host.owe { await host.requestsEnded(generation, consumerGone: termination != .finished) }
        }
        return s
    }

    /// From now on the stored values answer. When the consumer is gone (it let go of
    /// the stream), they also answer what it was handed and did not answer; a stream
    /// finished by a newer `requests()` keeps its requests (its consumer may still take
    /// and answer them).
    private func requestsEnded(_ generation: UInt64, consumerGone: Bool) async {
        if generation == peripheralState.requestGeneration { peripheralState.requestContinuation = nil }
        let (ended, kept) = peripheralState.handedRequests.reduce(into: ([GATTServer.Request](), [(UInt64, GATTServer.Request)]())) {
            if consumerGone && $1.0 == generation { $0.0.append($1.1) } else { $0.1.append($1) }
        }
        peripheralState.handedRequests = kept
        for r in ended where server.onLoop(r.id, { $0.isPending($1) }) { answerFromStoredValue(r) }
    }

    /// Remembers a request handed to the consumer of `requests()` until it is answered
    /// (checked when the list grows, so it holds the unanswered ones and a few more).
    private func handed(_ r: GATTServer.Request) {
        peripheralState.handedRequests.append((peripheralState.requestGeneration, r))
        guard peripheralState.handedRequests.count > 64 else { return }
        peripheralState.handedRequests = server.onLoop(peripheralState.handedRequests) { s, handed in handed.filter { s.isPending($0.1.id) } }
    }

    private func answerFromStoredValue(_ r: GATTServer.Request) {
        server.onLoop(r) { s, r in
            switch r.kind {
            case .read: s.respond(to: r.id, with: .success(s.database.attribute(r.handle)?.value ?? []))
            case let .write(v, _):
                s.setValue(v, at: r.handle)
                s.respond(to: r.id, with: .success([]))
            }
        }
    }

    private func lookup(_ valueHandle: UInt16) -> Characteristic? {
        for e in peripheralState.published.values {
            if let i = e.handles.characteristicValues.firstIndex(of: valueHandle) { return e.characteristics[i] }
        }
        return nil
    }

    private func lookupDescriptor(_ handle: UInt16) -> Descriptor? {
        for e in peripheralState.published.values where (e.handles.start...e.handles.end).contains(handle) {
            for (i, c) in e.characteristics.enumerated() {
                for (j, d) in (e.descriptors[ObjectIdentifier(c)] ?? c.descriptors).enumerated() where e.descriptorHandle(i, j) == handle { return d }
            }
        }
        return nil
    }

    /// A local server's event, as the server takes the PDU that made it (on the loop).
    func take(_ e: GATTServer.Event) {
        switch e {
        case let .written(h, v, conn):
            guard let central = links.active[conn] else { return }
            if let c = lookup(h) {
                peripheralBroadcast.yield(.written(c, value: v, central: central))
            } else if let d = lookupDescriptor(h) {
                peripheralBroadcast.yield(.descriptorWritten(d, value: v, central: central))
            }
        case let .subscription(h, conn, n, i):
            // A link that has ended reported its subscriptions as ended already.
            guard let central = links.active[conn] else { return }
            // A bonded client's subscriptions persist across connections: its bond has
            // this already (stored as the server took the write, by the host's observer).
            if let c = lookup(h) { peripheralBroadcast.yield(.subscriptionChanged(c, central: central, notify: n, indicate: i)) }
        case .clientRecordChanged:
            break  // Stored as it changed (the host's observer of the server's events).
        case let .securityNeeded(conn, level):
            securityNeeded(connection: conn, level: level)
        case let .signCounter(conn, counter):
            security.onLoop((counter, conn)) { $0.savePeerSignCounter($1.0, handle: $1.1) }
        case .disconnected, .connected:
            break
        }
    }

    /// A link ended: each subscription its peer had to the local server ends with it,
    /// reported as a change to neither notifications nor indications, as CoreBluetooth's
    /// `didUnsubscribeFrom` is. Called before the server forgets the link; nothing is
    /// stored, so a bond keeps what the central set (it comes back with a later link's
    /// encryption).
    func endSubscriptions(of central: Connection) {
        for s in server.onLoop(central.handle, { $0.subscriptions(connection: $1) }) {
            if let c = lookup(s.valueHandle) { peripheralBroadcast.yield(.subscriptionChanged(c, central: central, notify: false, indicate: false)) }
        }
    }

    /// A request the application answers, as the server takes it (on the loop).
    func take(_ r: GATTServer.Request) {
        guard let c = lookup(r.handle), let central = links.active[r.connection] else {
            server.onLoop(r.id) { $0.respond(to: $1, with: .failure(.unlikelyError)) }
            return
        }
        let kind: ReadWriteRequest.Kind
        switch r.kind {
        case let .read(o): kind = .read(offset: o)
        case let .write(v, w): kind = .write(value: v, withResponse: w)
        }
        let request = ReadWriteRequest(characteristic: c, central: central, kind: kind, id: r.id, server: server)
        if let k = peripheralState.requestContinuation, case .enqueued = k.yield(request) {
            // A Write Command has no answer to wait for.
            if case .write(_, withResponse: false) = r.kind { return }
            return handed(r)
        }
        // Nobody answers: the stored value does.
        answerFromStoredValue(r)
    }
}

extension BluetoothHost {
    // MARK: GAP service

    /// The GAP Device Name a central reads (at most 248 bytes of UTF-8). The Database
    /// Hash does not cover characteristic values, so it stays as it is: a bonded
    /// central's cache remains valid. Advertising carries a name only in its data.
    public func setDeviceName(_ name: String) async {
        await settle()
        await server.setValue(Array(name.utf8.prefix(248)), at: mandatory.deviceName)
    }

    /// The GAP Appearance (a category from the Bluetooth SIG's Assigned Numbers, 0 =
    /// unknown), as a central reads it; the Database Hash stays as it is.
    public func setAppearance(_ appearance: UInt16) async {
        await settle()
        await server.setValue([UInt8(appearance & 0xFF), UInt8(appearance >> 8)], at: mandatory.appearance)
    }

    /// The GAP Device Name now.
    public var deviceName: String {
        get async { String(decoding: await server.database.attribute(mandatory.deviceName)?.value ?? [], as: UTF8.self) }
    }
}
