// Link-layer parameters of a connection: connection interval, latency and
// supervision timeout (both roles), data length and PHY (when the controller has
// them; "Unknown HCI Command" and "Unsupported Feature" mean "not here", not an error).

import GAP
import HCI
import L2CAP
import NIOCore

/// Parameters in force after LE Connection Update Complete.
public struct ConnectionParameters: Hashable, Sendable {
    /// Connection interval in 1.25 ms units.
    public var interval: UInt16
    public var latency: UInt16
    /// Supervision timeout in 10 ms units.
    public var supervisionTimeout: UInt16
    public init(interval: UInt16, latency: UInt16, supervisionTimeout: UInt16) {
        self.interval = interval
        self.latency = latency
        self.supervisionTimeout = supervisionTimeout
    }
}

extension BluetoothHost {
    /// Asks for new connection parameters (interval in 1.25 ms units, timeout in 10 ms
    /// units). As central: LE Connection Update. As peripheral: the L2CAP Connection
    /// Parameter Update Request, which the central may refuse. Returns the parameters
    /// in force once LE Connection Update Complete arrives, or nil if none arrived
    /// within `limit`: at once when the central refused (or rejected) the request,
    /// else when `limit` passed (it did not answer, or did not update the link).
    @discardableResult
    public func updateParameters(_ c: Connection, intervalMin: UInt16, intervalMax: UInt16, latency: UInt16 = 0,
                                 supervisionTimeout: UInt16, within limit: Duration = .seconds(10)) async throws -> ConnectionParameters? {
        try requireReady()
        guard isActive(c.id) else { throw BLEError.disconnected(reason: .unknownConnectionIdentifier) }
        let updates = connectionEvents()
        if c.role == .central {
            try await controller.send(LEConnectionUpdate(connectionHandle: c.handle, connection: LEConnectionParameters(
                connectionIntervalMin: intervalMin, connectionIntervalMax: intervalMax, maxLatency: latency, supervisionTimeout: supervisionTimeout)))
        }
        let start = loop.now
        if c.role != .central {
            let request = ConnectionParameterUpdate(intervalMin: intervalMin, intervalMax: intervalMax, latency: latency, timeout: supervisionTimeout)
            do {
                guard try await l2cap.requestParameterUpdate(request, handle: c.handle, within: limit) else { return nil }
            } catch L2CAPChannelError.timedOut {
                return nil
            } catch {
                throw BLEError.disconnected(reason: .unknownConnectionIdentifier)
            }
        }
        let left = limit - Duration(loop.now - start)
        let done = await firstElement(updates.compactMap { e -> ConnectionParameters? in
            if case let .parametersUpdated(u, i, l, t) = e, u.id == c.id { return ConnectionParameters(interval: i, latency: l, supervisionTimeout: t) }
            return nil
        }, within: max(left, .zero), on: controller.loop)
        if done == nil, !isActive(c.id) { throw BLEError.disconnected(reason: .unknownConnectionIdentifier) }
        return done
    }

    /// LE Set Data Length (up to 251 octets per packet). False when the controller does
    /// not have it; the LE Data Length Change event follows when the length changes.
    @discardableResult
    public func updateDataLength(_ c: Connection, txOctets: UInt16 = 251, txTime: UInt16 = 2120) async throws -> Bool {
        try await optional { try await self.controller.send(LESetDataLength(connectionHandle: c.handle, txOctets: txOctets, txTime: txTime)) }
    }

    /// LE Set PHY preferring LE 2M both ways (`phys` bit 0 = 1M, 1 = 2M, 2 = Coded). False
    /// when the controller does not have it; LE PHY Update Complete follows.
    @discardableResult
    public func updatePHY(_ c: Connection, phys: UInt8 = 0x02) async throws -> Bool {
        try await optional { try await self.controller.send(LESetPHY(connectionHandle: c.handle, txPHYs: phys, rxPHYs: phys)) }
    }

    /// Runs an optional command: false for Unknown HCI Command, Unsupported Feature or
    /// Parameter Value and Unsupported Remote Feature (0x1A), else rethrows.
    private func optional(_ body: () async throws -> Void) async throws -> Bool {
        do {
            try await body()
            return true
        } catch let HCIError.commandFailed(_, status) where [HCIStatus.unknownCommand, .unsupportedFeatureOrParameterValue, HCIStatus(rawValue: 0x1A)].contains(status) {
            logger.debug("optional command not supported", metadata: ["hci.status": "\(status)"])
            return false
        }
    }
}

extension RemotePeripheral {
    /// See `BluetoothHost.updateParameters`.
    @discardableResult
    public func updateParameters(intervalMin: UInt16, intervalMax: UInt16, latency: UInt16 = 0, supervisionTimeout: UInt16,
                                 within limit: Duration = .seconds(10)) async throws -> ConnectionParameters? {
        try await host.updateParameters(connection, intervalMin: intervalMin, intervalMax: intervalMax, latency: latency,
                                        supervisionTimeout: supervisionTimeout, within: limit)
    }
}
