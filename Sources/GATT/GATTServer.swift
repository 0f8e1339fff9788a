// The GATT server actor: one database, any number of connections, each on its own
// ATT bearer. It answers requests through `GATTServerState`, reports writes and
// subscriptions, and sends notifications and indications to the connections whose
// Client Characteristic Configuration asks for them.

import ATT
import HCI
import Logging

public actor GATTServer {
    public enum Event: Hashable, Sendable {
        case written(handle: UInt16, value: [UInt8], connection: UInt16)
        case subscription(valueHandle: UInt16, connection: UInt16, notify: Bool, indicate: Bool)
        case connected(UInt16)
        case disconnected(UInt16)
    }

    private var state: GATTServerState
    private var bearers: [UInt16: ATTBearer] = [:]
    private var security: [UInt16: LinkSecurity] = [:]
    private let logger: Logger
    private let continuation: AsyncStream<Event>.Continuation
    /// Writes, subscriptions and connection changes. Buffer: unbounded; never ends.
    public nonisolated let events: AsyncStream<Event>

    public init(database: AttributeDatabase, prepareQueueLimit: Int = 64, logger: Logger) {
        self.state = GATTServerState(database: database, prepareQueueLimit: prepareQueueLimit)
        self.logger = logger
        (events, continuation) = AsyncStream<Event>.makeStream()
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

    private func databaseChanged(_ range: ClosedRange<UInt16>) async {
        if let h = handle(of: GATTCharacteristicType.databaseHash) { try? state.database.refreshDatabaseHash(at: h) }
        state.databaseChanged()
        guard let sc = handle(of: GATTCharacteristicType.serviceChanged) else { return }
        let v = [UInt8(range.lowerBound & 0xFF), UInt8(range.lowerBound >> 8), UInt8(range.upperBound & 0xFF), UInt8(range.upperBound >> 8)]
        // A confirmed Service Changed makes that client change-aware again.
        for c in await indicate(sc, value: v) { state.becameChangeAware(c) }
    }

    /// Serves the database on `bearer` (connection `handle`) until the bearer closes.
    public func attach(_ bearer: ATTBearer, connection handle: UInt16, security: LinkSecurity = LinkSecurity()) async {
        bearers[handle] = bearer
        self.security[handle] = security
        continuation.yield(.connected(handle))
        await bearer.start()
        let incoming = bearer.incoming
        // The server stays alive while it serves a connection: the task holds it until the bearer closes.
        Task {
            for await item in incoming { await self.serve(item, connection: handle) }
            self.detach(handle)
        }
    }

    private func serve(_ item: ATTBearer.Incoming, connection: UInt16) async {
        guard let bearer = bearers[connection] else { return }
        switch item {
        case let .request(pdu), let .command(pdu):
            let mtu = await bearer.mtu
            let (response, effects) = state.handle(pdu, connection: connection, mtu: mtu, security: security[connection] ?? LinkSecurity())
            if let response { await bearer.respond(response) }
            for e in effects {
                switch e {
                case let .written(h, v, c): continuation.yield(.written(handle: h, value: v, connection: c))
                case let .subscription(h, c, n, i): continuation.yield(.subscription(valueHandle: h, connection: c, notify: n, indicate: i))
                }
            }
        case .notification, .indication:
            logger.debug("server ignores client notifications", metadata: ["ble.handle": "\(connection)"])
        }
    }

    private func detach(_ handle: UInt16) {
        bearers[handle] = nil
        security[handle] = nil
        state.disconnected(handle)
        continuation.yield(.disconnected(handle))
    }

    /// Sets a value; subscribers are told with `notify(_:value:)` / `indicate(_:value:)`.
    public func setValue(_ value: [UInt8], at handle: UInt16) { state.database.setValue(value, at: handle) }

    /// Stores `value` and notifies every connection subscribed to notifications
    /// (truncated to ATT_MTU - 3). Returns the connections notified.
    @discardableResult
    public func notify(_ valueHandle: UInt16, value: [UInt8]) async -> [UInt16] {
        state.database.setValue(value, at: valueHandle)
        var sent: [UInt16] = []
        for (c, bearer) in bearers where state.configuration(valueHandle: valueHandle, connection: c).notify {
            let mtu = await bearer.mtu
            if (try? await bearer.sendUnacknowledged(.handleValueNotification(handle: valueHandle, value: Array(value.prefix(mtu - 3))))) != nil {
                sent.append(c)
            }
        }
        return sent.sorted()
    }

    /// Stores `value` and indicates it to every connection subscribed to indications,
    /// returning when all have confirmed (or failed). Returns the connections that confirmed.
    @discardableResult
    public func indicate(_ valueHandle: UInt16, value: [UInt8]) async -> [UInt16] {
        state.database.setValue(value, at: valueHandle)
        var targets: [(UInt16, ATTBearer)] = []
        for (c, b) in bearers where state.configuration(valueHandle: valueHandle, connection: c).indicate { targets.append((c, b)) }
        var confirmed: [UInt16] = []
        for (c, b) in targets {
            let mtu = await b.mtu
            do {
                try await b.indicate(handle: valueHandle, value: Array(value.prefix(mtu - 3)))
                confirmed.append(c)
            } catch {
                logger.debug("indication failed", metadata: ["ble.handle": "\(c)", "error": "\(error)"])
            }
        }
        return confirmed.sorted()
    }
}
