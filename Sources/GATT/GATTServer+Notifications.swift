// The GATT server's way out: Handle Value Notifications (one per value, or packed as
// Multiple Handle Value Notifications), paced by each subscriber's bearer, and
// Handle Value Indications, each connection confirming on its own (Vol 3, Part G,
// §4.10, §4.11; Part F, §3.4.7).

import ATT
import HCI
import L2CAP
import NIOCore

extension GATTServer {
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
        for c in bearers.keys
        where only?.contains(c) != false && Self.notifies(&state, valueHandle: valueHandle, connection: c) {
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

    /// Whether `connection` takes notifications of `valueHandle` now (subscribed, and
    /// change-aware: §2.5.2.1), asked of `state` in place. Called on the stored property
    /// itself (`state.configuration(…)`) a method gets a copy of the whole state first,
    /// every table in it retained and then released: 4 % of a notification's CPU end
    /// to end on the virtual radio.
    @inline(__always)
    static func notifies(_ state: inout GATTServerState, valueHandle: UInt16, connection: UInt16) -> Bool {
        state.configuration(valueHandle: valueHandle, connection: connection).notify && state.isChangeAware(connection)
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
        for c in bearers.keys where only?.contains(c) != false && state.isChangeAware(c) {
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
        let targets = bearers.keys.filter {
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
