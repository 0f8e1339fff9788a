// BluetoothHost, central role (used by `Central`): serialised LE Create
// Connection with timeout and cancellation, scans fed from the registry's merged
// view, the GATT peer of a link.

import ATT
import GAP
import GATT
import HCI
import L2CAP
import Logging
import NIOCore

extension BluetoothHost {
    // MARK: Central role (used by `Central`)

    /// LE Create Connection to `peer`, one attempt at a time (the controller allows one);
    /// on timeout or cancellation sends LE Create Connection Cancel.
    func connect(to peer: BluetoothAddress, type: AddressType, within limit: Duration,
                 parameters: LEConnectionParameters) async throws -> Connection {
        await settle()
        try requireReady()
        if let c = active.values.first(where: { $0.peer == peer && $0.role == .central }) { return c }
        await acquireConnectSlot()
        defer { releaseConnectSlot() }
        try Task.checkCancellation()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (k: CheckedContinuation<Connection, any Error>) in
                let timer = Task { [weak self] in
                    do { try await Task.sleep(for: limit) } catch { return }
                    await self?.abandonConnect(BLEError.connectionTimeout(peer, within: limit))
                }
                connectWaiter = ConnectWaiter(peer: peer, continuation: k, timer: timer)
                let extended = usesExtendedCommands
                Task {
                    do {
                        if extended {
                            try await self.controller.send(LEExtendedCreateConnection(peerAddressType: type, peerAddress: peer,
                                                                                     phys: [.init(connection: parameters)]))
                        } else {
                            try await self.controller.send(LECreateConnection(peerAddressType: type, peerAddress: peer, connection: parameters))
                        }
                    } catch {
                        await self.abandonConnect(error, cancel: false)
                    }
                }
            }
        } onCancel: {
            Task { await self.abandonConnect(CancellationError()) }
        }
    }

    func abandonConnect(_ error: any Error, cancel: Bool = true) async {
        guard let w = connectWaiter else { return }
        connectWaiter = nil
        w.timer.cancel()
        w.continuation.resume(throwing: error)
        if cancel { _ = try? await controller.send(LECreateConnectionCancel()) }
    }

    func acquireConnectSlot() async {
        if !connectBusy {
            connectBusy = true
            return
        }
        await withCheckedContinuation { connectQueue.append($0) }
    }

    func releaseConnectSlot() {
        if connectQueue.isEmpty { connectBusy = false } else { connectQueue.removeFirst().resume() }
    }

    /// Adds a scan subscriber; scanning starts with the first and stops with the last.
    func startScan(filter: ScanFilter, active: Bool, filterDuplicates: Bool, capacity: Int) async throws -> BufferedStream<ScanResult> {
        await settle()
        try requireReady()
        let (stream, cont) = AsyncStream<ScanResult>.makeStream(bufferingPolicy: .bufferingNewest(Swift.max(1, capacity)))
        let dropped = DropCounter()
        let id = nextScan
        nextScan += 1
        let first = scans.isEmpty
        scans[id] = ScanSubscriber(filter: filter, continuation: cont, dropped: dropped)
        // The consumer let go: the scan stops before the program's next operation goes out.
        cont.onTermination = { [weak self] _ in
            guard let host = self else { return }
            host.owe { await host.endScan(id) }
        }
        if first {
            do {
                if usesExtendedCommands {
                    try await Scanner.enableExtended(controller, active: active, filterDuplicates: filterDuplicates)
                } else {
                    try await Scanner.enable(controller, active: active, filterDuplicates: filterDuplicates)
                }
            } catch {
                scans[id] = nil
                throw error
            }
        }
        return BufferedStream(base: stream, dropped: dropped)
    }

    func endScan(_ id: UInt64) async {
        guard scans.removeValue(forKey: id) != nil, scans.isEmpty, state == .ready else { return }
        if usesExtendedCommands { _ = try? await Scanner.stopExtended(controller) } else { _ = try? await Scanner.stop(controller) }
    }

    /// The peer's GATT server on link `c`, in either role (a central connected to us may
    /// serve a database too); nil once the link is gone.
    public func gattPeer(on c: Connection) -> RemotePeripheral? {
        if let r = remotes[c.id] { return r }
        guard isActive(c.id), let client = clients[c.id] else { return nil }
        let r = RemotePeripheral(host: self, connection: c, client: client)
        remotes[c.id] = r
        return r
    }

    /// True the first time it is asked for link `c` (the central exchanges MTU once).
    func needsMTUExchange(_ c: Connection) -> Bool { mtuExchanged.insert(c.id).inserted }
}
