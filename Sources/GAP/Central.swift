// The central's first steps (Core Specification v5.4, Vol 3, Part C, §9.2–§9.3):
// find a peripheral by its advertised name, connect with a timeout (cancelled with
// LE Create Connection Cancel), and open a GATT client on the link. The beginning
// of GAP; issue 4 grows it into scanning, advertising and the facade.

import ATT
import GATT
import HCI
import L2CAP

public enum GAPError: Error, Equatable, Sendable, CustomStringConvertible {
    case notFound(name: String, within: Duration)
    case connectionTimeout(BluetoothAddress, within: Duration)

    public var description: String {
        switch self {
        case let .notFound(name, d): return "no device named '\(name)' advertised within \(d)"
        case let .connectionTimeout(a, d): return "no connection to \(a) within \(d) (is it advertising as connectable, and is the address type right?)"
        }
    }
}

public enum Central {
    /// Scans (active) until an advertising report carries `name` as its complete or
    /// shortened local name; stops scanning either way.
    public static func find(name: String, controller: HCIController, within limit: Duration) async throws -> (BluetoothAddress, AddressType) {
        // Continuous scanning (10 ms interval and window), every report, until the name shows.
        let (ads, _) = try await Scanner.start(controller, active: true, filterDuplicates: false,
                                              filter: ScanFilter(names: [name]), interval: 0x0010, window: 0x0010)
        let found = await firstElement(ads, within: limit).map { ($0.address, $0.addressType) }
        _ = try? await controller.send(LESetScanEnable(scanEnable: false))
        guard let found else { throw GAPError.notFound(name: name, within: limit) }
        return found
    }

    /// Connects as central; on timeout cancels the attempt and throws.
    public static func connect(to address: BluetoothAddress, type: AddressType, host: L2CAPHost, within limit: Duration) async throws -> L2CAPHost.Connection {
        let connections = await host.newConnections()
        try await host.controller.send(LECreateConnection(peerAddressType: type, peerAddress: address))
        guard let c = await firstElement(connections.filter { $0.peer == address }, within: limit) else {
            _ = try? await host.controller.send(LECreateConnectionCancel())
            throw GAPError.connectionTimeout(address, within: limit)
        }
        return c
    }

    /// Sends Disconnect (Remote User Terminated Connection) and waits at most `limit`
    /// for the link's Disconnection Complete; returns the reason reported, nil when none
    /// came (the controller refused, or the transport is gone).
    @discardableResult
    public static func disconnect(_ connection: L2CAPHost.Connection, host: L2CAPHost, within limit: Duration) async -> HCIStatus? {
        guard await host.currentConnections.contains(where: { $0.handle == connection.handle }) else { return nil }
        // What was sent last (the keys a pairing distributes, a Write Command) goes out
        // first: handed to the controller, then reported completed by it (up to half
        // the time allowed), so the Disconnect cannot overtake it.
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            host.loop.execute { host.onLoop { $0.whenSent(handle: connection.handle) { c.resume() } } }
        }
        await host.controller.packetsCompleted(handle: connection.handle, within: limit / 2)
        let events = await host.linkEvents()
        guard (try? await host.controller.send(Disconnect(connectionHandle: connection.handle))) != nil else { return nil }
        let ended = events.compactMap { e -> HCIStatus? in
            if case let .disconnected(c, reason) = e, c.handle == connection.handle { return reason }
            return nil
        }
        return await firstElement(ended, within: limit)
    }

    /// A started GATT client on `connection`, with the MTU exchanged.
    public static func gattClient(on connection: L2CAPHost.Connection, host: L2CAPHost, localRxMTU: UInt16 = 517) async throws -> GATTClient {
        let client = GATTClient(bearer: ATTBearer(channel: await L2CAPATTChannel(host: host, handle: connection.handle), localRxMTU: localRxMTU, logger: host.logger))
        await client.start()
        try await client.exchangeMTU()
        return client
    }
}

/// The first element of `seq` within `limit`, or nil.
public func firstElement<S: AsyncSequence & Sendable>(_ seq: S, within limit: Duration) async -> S.Element? where S.Element: Sendable {
    await withTaskGroup(of: S.Element?.self) { g in
        g.addTask {
            var it = seq.makeAsyncIterator()
            return try? await it.next()
        }
        g.addTask { try? await Task.sleep(for: limit); return nil }
        let r = await g.next() ?? nil
        g.cancelAll()
        return r
    }
}
