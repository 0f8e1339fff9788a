// A peripheral we are connected to as central: its services (FA10), characteristic
// reads (FA11), writes (FA12), subscriptions (FA13), descriptors (FA14) and RSSI
// and distance (FA15). Every operation ends with `BLEError.disconnected(reason:)`
// when the link goes away underneath it. The same type reaches the GATT server of a
// central connected to us (`BluetoothHost.gattPeer(on:)`): GATT roles do not follow
// link roles, and every link carries our server and our client on one ATT bearer.

import ATT
import GAP
import GATT
import HCI
import L2CAP
import Logging
import SMP

public struct RemoteDescriptor: Hashable, Sendable {
    public var uuid: BluetoothUUID
    public var handle: UInt16
}

public struct RemoteCharacteristic: Hashable, Sendable {
    public var uuid: BluetoothUUID
    public var properties: CharacteristicProperties
    public var declarationHandle: UInt16
    public var valueHandle: UInt16
    /// Last handle of the characteristic (its descriptors lie between value and end).
    public var endHandle: UInt16
    public var descriptors: [RemoteDescriptor]

    public init(uuid: BluetoothUUID, properties: CharacteristicProperties, declarationHandle: UInt16, valueHandle: UInt16,
                endHandle: UInt16, descriptors: [RemoteDescriptor] = []) {
        self.uuid = uuid
        self.properties = properties
        self.declarationHandle = declarationHandle
        self.valueHandle = valueHandle
        self.endHandle = endHandle
        self.descriptors = descriptors
    }

    /// The Client Characteristic Configuration descriptor, if any.
    public var clientConfiguration: RemoteDescriptor? { descriptors.first { $0.uuid == GATTType.clientCharacteristicConfiguration } }

    var discovered: DiscoveredCharacteristic {
        DiscoveredCharacteristic(uuid: uuid, declarationHandle: declarationHandle, valueHandle: valueHandle, properties: properties, end: endHandle)
    }
}

/// An include declaration (§3.2) in a peer's database: the service whose range holds
/// `handle` includes `service`.
public struct RemoteInclude: Hashable, Sendable {
    /// The include declaration's handle.
    public var handle: UInt16
    public var service: RemoteService
}

public struct RemoteService: Hashable, Sendable {
    public var uuid: BluetoothUUID
    public var isPrimary: Bool
    public var startHandle: UInt16
    public var endHandle: UInt16
    public var characteristics: [RemoteCharacteristic]

    public func characteristic(_ uuid: BluetoothUUID) -> RemoteCharacteristic? { characteristics.first { $0.uuid == uuid } }
}

/// Values of a subscription. When the consumer lets go of the sequence (or the task
/// iterating it is cancelled) the subscription is written off the peer's CCCD; it
/// finishes after `unsubscribe(from:)` or a second subscription to the same
/// characteristic, and throws
/// `BLEError.disconnected(reason:)` when the link drops. Buffer: the newest
/// `capacity` values; `dropped` counts the rest.
public struct CharacteristicValues: AsyncSequence, Sendable {
    public typealias Element = [UInt8]
    let base: BufferedThrowingStream<[UInt8]>
    public var dropped: DropCounter { base.dropped }
    public func makeAsyncIterator() -> BufferedThrowingStream<[UInt8]>.Iterator { base.makeAsyncIterator() }
}

public actor RemotePeripheral {
    public nonisolated let connection: Connection
    public nonisolated let host: BluetoothHost
    /// The GATT client on this link, for procedures the facade does not wrap.
    public nonisolated let client: GATTClient
    private var services: [RemoteService]?
    /// `services` is the layout stored with the peer's bond (read from it, or stored).
    private var servicesInBond = false
    /// On the controller's loop, with the host (see Ordering.swift).
    public nonisolated var unownedExecutor: UnownedSerialExecutor { host.unownedExecutor }

    init(host: BluetoothHost, connection: Connection, client: GATTClient) {
        self.host = host
        self.connection = connection
        self.client = client
    }

    public nonisolated var address: BluetoothAddress { connection.peer }

    /// The ATT_MTU in use: 23 until the MTU exchange `Central.connect` began is
    /// answered (every GATT operation waits for that answer).
    public var mtu: Int { get async { await client.bearer.mtu } }

    /// What `Central.connect` does once the link is up: Exchange MTU (§4.3.1), waiting
    /// for the answer at most `limit`. The exchange serves GATT, not the link, so only
    /// the link's end (or cancellation) makes this throw:
    /// - a server that refuses it (Request Not Supported: "the default MTU shall be
    ///   used"; or any other Error Response) leaves ATT_MTU at 23;
    /// - a server that has not answered within `limit` (a peer whose ATT is silent: the
    ///   kernel without bluetoothd) leaves the request outstanding; GATT operations
    ///   wait for its answer or its 30 s transaction timeout, while the link serves
    ///   pairing and L2CAP channels at once.
    func exchangeMTU(within limit: Duration) async throws {
        let (answers, answered) = BufferedStream<Result<Int, any Error>>.makeStream(capacity: 1)
        await client.startMTUExchange { answered.yield($0); answered.finish() }
        let answer = await firstElement(answers, within: limit, on: host.loop)
        try Task.checkCancellation()
        let link: Logger.Metadata = ["ble.handle": "\(connection.handle)"]
        switch answer {
        case .success?:
            return
        case nil:
            host.logger.notice("no answer to Exchange MTU within \(limit); ATT_MTU stays 23 and GATT waits for the answer", metadata: link)
        case let .failure(e)?:
            if Self.mayMeanTheLinkWent(e), let end = await host.end(of: connection.id, within: .seconds(1)) { throw end.error }
            host.logger.warning("Exchange MTU failed: \(e); ATT_MTU stays 23", metadata: link)
        }
    }

    /// What an error means for the user: a peer's Error Response, or the link's end.
    func translate(_ error: any Error) async -> any Error {
        if case let GATTClientError.att(.errorResponse(_, h, code)) = error { return BLEError.att(code, handle: h) }
        if error is CancellationError { return error }
        // The controller refused or did not answer a command: that is the answer, not the link.
        if let e = error as? HCIError {
            switch e {
            case .commandFailed, .commandTimedOut, .malformedResponse: return error
            case .transportClosed, .connectionClosed: break
            }
        }
        // The bearer fails when the link goes: report why the link went. A peer's
        // answer that broke the protocol is the answer, at once: the link is up.
        guard Self.mayMeanTheLinkWent(error) else { return error }
        if let end = await host.end(of: connection.id, within: .seconds(1)) { return end.error }
        return error
    }

    /// Whether `error` can come from the link going away (the bearer closed under a
    /// request, a request that timed out as the link failed, a send to a link that is
    /// gone): only then is the link's end worth waiting for. What a peer's answer
    /// broke (a malformed response, handles out of order, an Error Response) is not.
    static func mayMeanTheLinkWent(_ error: any Error) -> Bool {
        func bearer(_ e: ATTBearerError) -> Bool {
            switch e {
            case .bearerUnusable, .transactionTimeout: return true
            case .errorResponse, .malformedResponse, .unexpectedResponse: return false
            }
        }
        switch error {
        case let e as ATTBearerError: return bearer(e)
        case let e as GATTClientError:
            if case let .att(a) = e { return bearer(a) }
            return false
        default: return true
        }
    }

    /// Runs a GATT operation. When the peer refuses it for the link's security and the
    /// host pairs on demand, the link is encrypted (from a bond) or paired and the
    /// operation runs again, one step at a time as BlueZ does: encryption first, then an
    /// authenticated key if the peer still refuses (`SecurityOnDemand`). A pairing that
    /// fails throws its `SecurityError`. The whole operation runs in a task that prefers
    /// the host's loop, so its waits resume there, not on the caller's executor.
    private func run<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        try await withTaskExecutorPreference(host.taskExecutor) { try await runOnLoop(body) }
    }

    /// `run` on the loop.
    private func runOnLoop<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        await host.settle()
        guard host.securityOptions.pairOnDemand else {
            do { return try await body() } catch { throw await translate(error) }
        }
        let host = self.host, connection = self.connection
        do {
            return try await SecurityOnDemand.run(current: { await host.security(of: connection) },
                                                  secure: { _ = try await host.secure(connection, level: $0) }, body)
        } catch let e as SecurityError {
            throw e
        } catch {
            throw await translate(error)
        }
    }

    /// The link's security now.
    public var security: LinkSecurityState { get async { await host.security(of: connection) } }

    /// Encrypts the link (from a bond) or pairs, to at least `level`. Throws `SecurityError`.
    @discardableResult
    public func secure(level: SecurityLevel = .encrypted) async throws -> LinkSecurityState {
        try await host.secure(connection, level: level)
    }

    // MARK: EATT

    /// Opens `count` (1...5) enhanced ATT bearers (EATT, Vol 3, Part G, §5.3) to this
    /// peripheral with one enhanced credit-based request to SPSM 0x0027, after checking
    /// that its Server Supported Features has the EATT bit and setting the EATT and
    /// Multiple Handle Value Notifications bits in its Client Supported Features. From
    /// then on the GATT client spreads operations over the bearers, one transaction on
    /// each at a time (`GATTClient.addEnhancedBearer`); requests the peer's client
    /// sends on them are answered by the local GATT server. `parameters` default to
    /// `BluetoothHost.enhancedBearerParameters`. An enhanced bearer's channel shall be
    /// encrypted (Vol 3, Part G, §5.3.2): an unencrypted link is first encrypted from
    /// the bond, or paired (`secure(level:)`), whether or not the server would take
    /// the channel without. Returns how many enhanced bearers are open now. Throws
    /// `BLEError.notSupported` when the server does not take EATT, `SecurityError`
    /// when the link cannot be encrypted, `L2CAPChannelError` as `openChannels`.
    @discardableResult
    public func openEnhancedBearers(count: Int = 2, parameters: CreditBasedParameters? = nil) async throws -> Int {
        let features = try await run { try await client.read(uuid: GATTCharacteristicType.serverSupportedFeatures) }
        guard let f = features.first?.value.first, f & ServerSupportedFeatures.eatt != 0 else {
            throw BLEError.notSupported("the peer's GATT server does not take enhanced ATT bearers (Server Supported Features)")
        }
        if await !security.encrypted { try await secure(level: .encrypted) }
        // Bits once set stay set (§7.2): add ours to what this client has written.
        if let csf = try await run({ try await client.read(uuid: GATTCharacteristicType.clientSupportedFeatures) }).first {
            let bits = (csf.value.first ?? 0) | ClientSupportedFeatures.eatt | ClientSupportedFeatures.multipleHandleValueNotifications
            try await run { try await client.write(csf.handle, value: [bits]) }
        }
        let channels = try await host.openChannels(to: connection, spsm: EATTChannel.spsm, count: count, parameters: parameters ?? host.enhancedBearerParameters)
        for channel in channels {
            let bearer = ATTBearer(enhanced: channel, logger: host.logger)
            await client.addEnhancedBearer(bearer, server: host.server.handler(connection: connection.handle, on: bearer))
        }
        return await client.enhancedBearerCount
    }

    // MARK: FA10

    /// Discovers every service, characteristic and descriptor (once; later calls
    /// return what was found unless `refresh`).
    ///
    /// With a bonded peer whose layout is stored with the bond, one read of the
    /// peer's Database Hash replaces the discovery while the hash is unchanged (robust
    /// caching, Vol 3, Part G, §2.5.2.1; the read also makes us change-aware). After a
    /// discovery on a link encrypted with the bond's key, the layout and hash are
    /// stored with the bond (also when the link is bonded later, by `secure(level:)`
    /// or pairing on demand).
    public func discoverServices(refresh: Bool = false) async throws -> [RemoteService] {
        if let services, !refresh { return services }
        if !refresh, let cached = await cachedServices() { return cached }
        let found = try await run { try await client.discoverAll() }
        let s = found.map { (svc, chars) in
            RemoteService(uuid: svc.uuid, isPrimary: svc.isPrimary, startHandle: svc.start, endHandle: svc.end,
                          characteristics: chars.map { Self.wrap($0.0, $0.1) })
        }
        services = s
        servicesInBond = false
        await storeServices()
        return s
    }

    /// The layout stored with the peer's bond, when the peer's Database Hash still matches.
    private func cachedServices() async -> [RemoteService]? {
        guard let cache = await host.security.cachedDatabase(handle: connection.handle),
              let hash = try? await client.read(uuid: GATTCharacteristicType.databaseHash).first?.value, hash == cache.hash
        else { return nil }
        let s = cache.services.map(Self.service)
        await client.adoptDiscovery(s.map { svc in
            (DiscoveredService(uuid: svc.uuid, start: svc.startHandle, end: svc.endHandle, isPrimary: svc.isPrimary),
             svc.characteristics.map { c in (c.discovered, c.descriptors.map { DiscoveredDescriptor(uuid: $0.uuid, handle: $0.handle) }) })
        })
        services = s
        servicesInBond = true
        host.logger.debug("GATT layout from the bond", metadata: ["ble.handle": "\(connection.handle)", "gatt.services": "\(s.count)"])
        return s
    }

    /// Stores the discovered layout with the peer's Database Hash in its bond (only on a
    /// link encrypted with the bond's key; nothing when the peer has no Database Hash).
    /// Owed work: the hash's Read Request is queued now, in its place among the
    /// program's requests, and its answer taken later, so the program's next operation
    /// (a disconnect, a scan) does not wait behind a request outstanding before it.
    func storeServices() async {
        guard let services, !servicesInBond, await host.security.bond(handle: connection.handle) != nil,
              let hashHandle = services.lazy.flatMap(\.characteristics).first(where: { $0.uuid == GATTCharacteristicType.databaseHash })?.valueHandle
        else { return }
        servicesInBond = true
        let layout = services.map(Self.cached), security = host.security, handle = connection.handle
        // Stored as the answer comes, on the loop: before the answers queued after it
        // reach the program (which may then look at its bonds).
        await client.bearer.startRequest(.readRequest(handle: hashHandle)) { [weak self] outcome in
            guard case let .success(.readResponse(hash)) = outcome, hash.count == 16 else {
                Task { await self?.storeFailed() }
                return
            }
            let database = CachedDatabase(hash: hash, services: layout)
            if security.loop.inEventLoop {
                security.onLoop { $0.saveDatabase(database, handle: handle) }
            } else {
                Task { await security.saveDatabase(database, handle: handle) }
            }
        }
    }

    /// The Database Hash did not come: a later encryption may try again.
    private func storeFailed() { servicesInBond = false }

    static func cached(_ s: RemoteService) -> CachedDatabase.Service {
        CachedDatabase.Service(uuid: s.uuid.description, start: s.startHandle, end: s.endHandle, primary: s.isPrimary, characteristics: s.characteristics.map { c in
            CachedDatabase.Characteristic(uuid: c.uuid.description, declaration: c.declarationHandle, value: c.valueHandle, properties: c.properties.rawValue,
                                          end: c.endHandle, descriptors: c.descriptors.map { CachedDatabase.Descriptor(uuid: $0.uuid.description, handle: $0.handle) })
        })
    }

    static func service(_ s: CachedDatabase.Service) -> RemoteService {
        // UUID texts were written by `cached`; one that does not parse (a damaged file) reads as 0000.
        func uuid(_ text: String) -> BluetoothUUID { BluetoothUUID(text) ?? BluetoothUUID(0x0000) }
        return RemoteService(uuid: uuid(s.uuid), isPrimary: s.primary, startHandle: s.start, endHandle: s.end, characteristics: s.characteristics.map { c in
            RemoteCharacteristic(uuid: uuid(c.uuid), properties: CharacteristicProperties(rawValue: c.properties), declarationHandle: c.declaration,
                                 valueHandle: c.value, endHandle: c.end, descriptors: c.descriptors.map { RemoteDescriptor(uuid: uuid($0.uuid), handle: $0.handle) })
        })
    }

    /// Service Changed indications from the peer: each changed handle range, as the
    /// peer reports it; the cached discovery is dropped so the next
    /// `discoverServices()` asks again. Nil when the peer has no Service Changed.
    /// Buffer: the newest 64 changes, drops counted; ends with the link.
    public func serviceChanges() async throws -> BufferedStream<ClosedRange<UInt16>>? {
        _ = try await discoverServices()
        guard let changes = try await run({ try await client.trackServiceChanges() }) else { return nil }
        let (stream, cont) = BufferedStream<ClosedRange<UInt16>>.makeStream(capacity: 64)
        let feeder = Task { [weak self] in
            for await r in changes {
                await self?.forgetServices()
                cont.yield(r)
            }
            cont.finish()
        }
        cont.onTermination = { _ in feeder.cancel() }
        return stream
    }

    /// The services `service` includes (secondary services are found only this way),
    /// with their characteristics and descriptors.
    public func includedServices(of service: RemoteService) async throws -> [RemoteService] {
        try await run {
            let includes = try await client.findIncludedServices(of: DiscoveredService(uuid: service.uuid, start: service.startHandle,
                                                                                       end: service.endHandle, isPrimary: service.isPrimary))
            return try await resolve(includes, primary: services ?? []).map(\.service)
        }
    }

    /// Every include declaration in the peer's database, in handle order, found with one
    /// Read By Type over all handles (plus a Read per included service with a 128-bit
    /// UUID), each with the service it includes: a primary one as `discoverServices()`
    /// found it, a secondary one discovered with its characteristics and descriptors
    /// (once, however many services include it). The including service is the one
    /// whose handle range holds `RemoteInclude.handle`.
    public func includes() async throws -> [RemoteInclude] {
        let primary = try await discoverServices()
        return try await run { try await resolve(try await client.findIncludedServices(), primary: primary) }
    }

    /// Each include with its service: a primary one already known (by its handle range:
    /// its declaration, not the include, says its UUID) is taken as it is; the others
    /// (secondary services) are discovered together, once each.
    private func resolve(_ includes: [DiscoveredInclude], primary: [RemoteService]) async throws -> [RemoteInclude] {
        var known: [ClosedRange<UInt16>: RemoteService] = [:]
        for s in primary { known[s.startHandle...s.endHandle] = s }
        var unknown: [ClosedRange<UInt16>: DiscoveredService] = [:]
        for inc in includes where known[inc.service.start...inc.service.end] == nil {
            unknown[inc.service.start...inc.service.end] = unknown[inc.service.start...inc.service.end] ?? inc.service
        }
        // CharacteristicDiscovery wants its services in handle order.
        for (svc, chars) in try await client.discoverContents(of: unknown.values.sorted { $0.start < $1.start }) {
            known[svc.start...svc.end] = RemoteService(uuid: svc.uuid, isPrimary: false, startHandle: svc.start, endHandle: svc.end,
                                                       characteristics: chars.map { Self.wrap($0.0, $0.1) })
        }
        return includes.compactMap { inc in known[inc.service.start...inc.service.end].map { RemoteInclude(handle: inc.handle, service: $0) } }
    }

    static func wrap(_ c: DiscoveredCharacteristic, _ ds: [DiscoveredDescriptor]) -> RemoteCharacteristic {
        RemoteCharacteristic(uuid: c.uuid, properties: c.properties, declarationHandle: c.declarationHandle, valueHandle: c.valueHandle,
                             endHandle: c.end, descriptors: ds.map { RemoteDescriptor(uuid: $0.uuid, handle: $0.handle) })
    }

    private func forgetServices() {
        services = nil
        servicesInBond = false
    }

    /// The first characteristic with `uuid` (in service `service` when given), discovering if needed.
    public func characteristic(_ uuid: BluetoothUUID, in service: BluetoothUUID? = nil) async throws -> RemoteCharacteristic {
        for s in try await discoverServices() where service == nil || s.uuid == service {
            if let c = s.characteristic(uuid) { return c }
        }
        throw BLEError.notSupported("the peer has no characteristic \(uuid)")
    }

    // MARK: FA11, FA12

    /// Reads a value, long values included (Read Blob until the end).
    public func read(_ c: RemoteCharacteristic) async throws -> [UInt8] {
        try await read(handle: c.valueHandle)
    }

    /// Reads the attribute at `handle`, long values included, without discovery: for a
    /// handle known otherwise (a tool's `--handle`, a fixed handle a profile documents).
    public func read(handle: UInt16) async throws -> [UInt8] {
        try await run { try await client.read(handle) }
    }

    /// Reads several values in few round trips, whole and in the order asked: as many
    /// as one Read Multiple Variable Length request holds at a time (ATT_MTU), then a
    /// read of each value its response cut short or left out (long values included);
    /// a server without that request (Request Not Supported) has each read in turn. A
    /// value the server refuses ends the
    /// whole with its error (`BLEError.att`, naming the handle), as the request does.
    public func read(_ characteristics: [RemoteCharacteristic]) async throws -> [[UInt8]] {
        try await read(handles: characteristics.map(\.valueHandle))
    }

    /// `read(_:)` for attributes known by handle.
    public func read(handles: [UInt16]) async throws -> [[UInt8]] {
        try await run { try await client.readValues(handles) }
    }

    /// Reads every characteristic value of type `uuid` in `range` without discovery,
    /// with Read Using Characteristic UUID (Vol 3, Part G, §4.8.2: Read By Type
    /// Requests, as BlueZ's `char-read-uuid` and Bumble's `read_characteristics_by_uuid`):
    /// (handle, value) of each, in handle order, values whole (one the response cut is
    /// completed with Read Blob). None is an empty result. A server's refusal (Read Not
    /// Permitted, Insufficient Authentication, ...) ends it with its error, as `read`
    /// does; security refusals are met as `GATTSecurityPolicy` says.
    public func read(uuid: BluetoothUUID, in range: ClosedRange<UInt16> = 0x0001...0xFFFF) async throws -> [(handle: UInt16, value: [UInt8])] {
        guard range.lowerBound > 0 else { throw BLEError.invalidArgument("handle 0x0000 is not an attribute's: a range starts at 0x0001") }
        return try await run { try await client.read(uuid: uuid, in: range, all: true) }.map { ($0.handle, $0.value) }
    }

    /// Writes several values, by handle, as one Reliable Write (Vol 3, Part G, §4.9.5): each is
    /// queued with Prepare Write Requests (long values in pieces), every Prepare Write
    /// Response is checked to echo what was sent, and one Execute Write Request then
    /// writes them all together; the server writes none of them when one fails. A
    /// response that does not echo its request cancels the queue
    /// (`GATTClientError.preparedWriteMismatch`); a piece the server refuses cancels what
    /// was queued and throws its error. All of it goes on one ATT bearer.
    public func writeReliably(handles writes: [(handle: UInt16, value: [UInt8])]) async throws {
        guard !writes.isEmpty else { throw BLEError.invalidArgument("a reliable write needs at least one value") }
        try await run { try await client.reliableWrite(writes.map { ($0.handle, $0.value) }) }
    }

    /// `writeReliably(handles:)` for characteristics found by discovery.
    public func writeReliably(_ writes: [(RemoteCharacteristic, [UInt8])]) async throws {
        try await writeReliably(handles: writes.map { (handle: $0.0.valueHandle, value: $0.1) })
    }

    /// Writes a value: with response (long values as a prepared write), or as Write
    /// Command, which returns once the controller has buffer room for it (backpressure,
    /// never a silent drop).
    public func write(_ value: [UInt8], to c: RemoteCharacteristic, withResponse: Bool = true) async throws {
        try await write(value, handle: c.valueHandle, withResponse: withResponse)
    }

    /// Writes the attribute at `handle` as `write(_:to:withResponse:)` does, without discovery.
    public func write(_ value: [UInt8], handle: UInt16, withResponse: Bool = true) async throws {
        try await run {
            if withResponse {
                try await client.write(handle, value: value)
            } else {
                let limit = await client.bearer.mtu - 3
                guard value.count <= limit else { throw BLEError.notSupported("a Write Command carries at most \(limit) bytes (ATT_MTU - 3)") }
                try await client.writeWithoutResponse(handle, value: value)
                try await writeCommandsSettled()
            }
        }
    }

    /// Returns once what the bearer holds is in the controller's buffers, as a Write
    /// Command returns; throws the link's end (`BLEError.disconnected` with its reason)
    /// when the link ended before.
    func writeCommandsSettled() async throws {
        await client.bearer.drain()
        if let end = await host.ended(connection.id) { throw end.error }
    }

    /// A writer for Write Commands to `c` from a task off the host's loop (a plain task
    /// on the cooperative pool): `send` checks and queues each value and returns,
    /// suspending only while `capacity` values wait, and a task on the loop hands them
    /// to the link in order as `write(_:to:withResponse: false)` does. Here each such
    /// `write` from a plain task goes to the loop and back, two thread wake-ups a value;
    /// with the writer the two threads wake once per batch. Throws
    /// `BLEError.notSupported` when `c` does not take Write Commands (its properties lack
    /// Write Without Response), `invalidArgument` for a capacity below 1, and the link's
    /// end when it has ended.
    public func writeWithoutResponseWriter(for c: RemoteCharacteristic, capacity: Int = 64) async throws -> WriteWithoutResponseWriter {
        guard c.properties.contains(.writeWithoutResponse) else {
            throw BLEError.notSupported("\(c.uuid) does not take Write Commands (its properties: \(c.properties.names.joined(separator: ",")))")
        }
        let host = self.host, connection = self.connection, client = self.client, handle = c.valueHandle
        let limit = try await run {
            if let end = await host.ended(connection.id) { throw end.error }
            return await client.bearer.mtu - 3
        }
        return try WriteWithoutResponseWriter(
            characteristic: c, maximumLength: limit, capacity: capacity, executor: host.taskExecutor,
            deliver: { [self] value in
                do { try await client.writeWithoutResponse(handle, value: value) } catch { throw await translate(error) }
            },
            settle: { [self] in try await writeCommandsSettled() })
    }

    /// Writes a value as a Signed Write Command (Vol 3, Part G, §4.9.2), for a
    /// characteristic with the Authenticated Signed Writes property on a bonded peer
    /// that took our CSRK (pair with `KeyDistribution.signingKey`). Each write uses the
    /// next SignCounter, stored with the bond before it goes out. On an encrypted link it
    /// goes as a plain Write Command, as §4.9.2 asks. At most ATT_MTU - 15 bytes; returns
    /// once the controller has room for it. Throws `SecurityError.noSigningKey` without
    /// a key to sign with.
    public func writeSigned(_ value: [UInt8], to c: RemoteCharacteristic) async throws {
        try await writeSigned(value, handle: c.valueHandle)
    }

    /// Writes the attribute at `handle` as `writeSigned(_:to:)` does, without discovery.
    public func writeSigned(_ value: [UInt8], handle attribute: UInt16) async throws {
        let security = host.security, handle = connection.handle
        guard !(await security.security(handle: handle).encrypted) else {
            try await write(value, handle: attribute, withResponse: false)
            return
        }
        try await run {
            let limit = await client.bearer.mtu - 15
            guard value.count <= limit else { throw BLEError.notSupported("a Signed Write Command carries at most \(limit) bytes (ATT_MTU - 15)") }
            let key = try await security.nextSignature(handle: handle)
            try await client.writeSigned(attribute, value: value, csrk: key.csrk, counter: key.counter)
            try await writeCommandsSettled()
        }
    }

    // MARK: FA13

    /// Subscribes (notifications if the characteristic has them, else indications;
    /// `indications` chooses, and a kind its properties do not offer throws
    /// `BLEError.notSupported` before anything is sent) and returns the values as they arrive. Buffer: the newest
    /// `capacity` values; `dropped` counts the ones lost to a consumer that fell behind.
    /// The sequence finishes after `unsubscribe` (or a new subscription to the same
    /// characteristic) and throws what `subscribe(to:indications:onValue:ended:)` hands
    /// `ended` otherwise (the link's end, or the bearer's); a consumer that stops
    /// iterating unsubscribes.
    public func subscribe(to c: RemoteCharacteristic, indications: Bool? = nil, capacity: Int = 256) async throws -> CharacteristicValues {
        guard let cccd = c.clientConfiguration else { throw BLEError.notSupported("\(c.uuid) has no Client Characteristic Configuration") }
        let (stream, cont) = BufferedThrowingStream<[UInt8]>.makeStream(capacity: capacity)
        try await subscribe(to: c, indications: indications,
                            onValue: { cont.yield($0) },
                            ended: { cont.finish(throwing: $0) })
        let host = self.host, gatt = self.client
        cont.onTermination = { reason in
            // The consumer stopped: tell the peer (unless the link is what stopped it), before
            // anything the program does next goes out.
            if case .cancelled = reason { host.owe { await gatt.unsubscribeQueued(c.discovered, cccd: cccd.handle) } }
        }
        return CharacteristicValues(base: stream)
    }

    /// Subscribes and hands each value to `onValue` as it arrives: on the host's loop,
    /// in the order the controller delivered them, with no task and no buffer in between
    /// (the shape of Bumble's `subscribe(subscriber)`; indications are confirmed first).
    /// Nothing is dropped, and nothing else on the loop runs while `onValue` does: keep
    /// it short and never block in it.
    ///
    /// `ended` is called once, after the last value: with nil after `unsubscribe` (or a
    /// new subscription to the same characteristic), with the link's end
    /// (`BLEError.disconnected`) when the link went, with `ATTBearerError.bearerUnusable`
    /// when the bearer closed while the link stayed (an ATT transaction timed out).
    public func subscribe(to c: RemoteCharacteristic, indications: Bool? = nil,
                          onValue: @escaping @Sendable ([UInt8]) -> Void,
                          ended: @escaping @Sendable ((any Error)?) -> Void = { _ in }) async throws {
        guard let cccd = c.clientConfiguration else { throw BLEError.notSupported("\(c.uuid) has no Client Characteristic Configuration") }
        let useIndications = indications ?? !c.properties.contains(.notify)
        // Only a property's bit permits its action (Vol 3 Part G §3.3.1.1): asking for
        // what the characteristic does not offer would be refused (BlueZ, and our
        // server, answer 0xFD) or, by a lax server, accepted with nothing ever sent.
        guard c.properties.contains(useIndications ? .indicate : .notify) else {
            throw BLEError.notSupported("\(c.uuid) does not \(useIndications ? "indicate" : "notify") (its properties: \(c.properties.names.joined(separator: ",")))")
        }
        let host = self.host, id = connection.id, bearer = client.bearer
        try await run {
            try await client.subscribe(c.discovered, cccd: cccd.handle, indications: useIndications, deliver: onValue, ended: {
                // The values ended: we unsubscribed (the bearer is still open), or the link
                // went (say why: the host hears of it a little after the bearer closed), or
                // the bearer closed with the link up (an ATT transaction timed out).
                Task {
                    guard let unusable = await bearer.unusableReason else { return ended(nil) }
                    ended(await host.end(of: id, within: .seconds(1))?.error ?? ATTBearerError.bearerUnusable(unusable))
                }
            })
        }
    }

    /// Ends a subscription explicitly (the CCCD is written to 0; the sequence finishes).
    public func unsubscribe(from c: RemoteCharacteristic) async throws {
        guard let cccd = c.clientConfiguration else { throw BLEError.notSupported("\(c.uuid) has no Client Characteristic Configuration") }
        try await run { try await client.unsubscribe(c.discovered, cccd: cccd.handle) }
    }

    // MARK: FA14

    public func read(_ d: RemoteDescriptor) async throws -> [UInt8] {
        try await read(handle: d.handle)
    }

    public func write(_ value: [UInt8], to d: RemoteDescriptor) async throws {
        try await write(value, handle: d.handle)
    }

    // MARK: FA15

    /// Read RSSI (the controller's view of the link, dBm).
    public func readRSSI() async throws -> Int8 {
        try await run { try await host.controller.send(ReadRSSI(connectionHandle: connection.handle)).rssi }
    }

    /// Reads the RSSI and estimates the distance from what the peripheral advertised
    /// (TX Power Level or a beacon's measured power), or from `rssiAtOneMetre` when
    /// given. Nil when there is no calibration. A controller without Read RSSI (Unknown
    /// HCI Command) gives the smoothed RSSI of the device's advertisements instead, and
    /// nil metres when there is none. See `DistanceEstimate` for the model.
    public func estimateDistance(rssiAtOneMetre: Double? = nil) async throws -> (rssi: Int8?, metres: Double?) {
        let rssi: Int8?
        do { rssi = try await readRSSI() } catch let HCIError.commandFailed(_, status) where status == .unknownCommand {
            rssi = await host.registry.device(address)?.smoothedRSSI.map { Int8(clamping: Int($0.rounded())) }
        }
        guard let rssi, rssi != 127 else { return (nil, nil) }
        if let p = rssiAtOneMetre { return (rssi, DistanceEstimate.metres(rssi: Double(rssi), rssiAtOneMetre: p)) }
        let d = await host.registry.device(address)?.merged
        if let b = d?.iBeacon { return (rssi, DistanceEstimate.metres(rssi: Double(rssi), rssiAtOneMetre: Double(b.measuredPower))) }
        if let tx = d?.txPowerLevel { return (rssi, DistanceEstimate.metres(rssi: Double(rssi), txPowerLevel: tx)) }
        return (rssi, nil)
    }

    // MARK: FA04

    /// Disconnects and returns the reason the controller reported: what is owed and
    /// what the link has queued go first (at most 2 s: a controller whose buffers never
    /// drain does not keep the link up), then Disconnect (its answer awaited 5 s).
    @discardableResult
    public func disconnect() async throws -> HCIStatus {
        // `BluetoothHost.disconnect` settles, then flushes the link's L2CAP queue, where
        // the bearer's PDUs are as soon as it sends them.
        try await host.disconnect(connection)
    }

    /// Waits until the link ends (at most `limit`) and returns why; nil while it is up.
    public func disconnection(within limit: Duration) async -> BLEError? {
        await host.end(of: connection.id, within: limit)?.error
    }
}

extension RemoteCharacteristic: CustomStringConvertible {
    /// "2A19 (Battery Level), value 0x0003, read,notify": the assigned name when the UUID has one.
    public var description: String {
        let props = properties.names.joined(separator: ",")
        return "\(uuid)\(uuid.name.map { " (\($0))" } ?? ""), value 0x\(hex4(valueHandle)), \(props)"
    }

    /// The value as a person reads it for the common SIG characteristics (Battery Level
    /// as "87 %", Device Name as text, PnP ID field by field), nil for others.
    public func formatted(_ value: [UInt8]) -> String? { CharacteristicFormatter.describe(value, of: uuid) }
}
