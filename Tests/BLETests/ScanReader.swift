// Reading a scan in a test without holding up the test: the results gathered in the
// background, handed over on request.

import BLE
import HCI
import Snoop
import Synchronization

/// Reads a scan's stream in the background (letting go of the stream would stop the
/// scan) and hands over what it reported since the last look.
final class ScanReader: Sendable {
    private final class Gathered: Sendable {
        private let results = Mutex<[ScanResult]>([])
        func append(_ r: ScanResult) { results.withLock { $0.append(r) } }
        func take() -> [ScanResult] { results.withLock { r in defer { r.removeAll() }; return r } }
    }
    private let gathered = Gathered()
    private let task: Task<Void, Never>

    init(_ stream: BufferedStream<ScanResult>) {
        let gathered = self.gathered
        task = Task { for await r in stream { gathered.append(r) } }
    }

    /// What was reported since the last call, after `settling` on `host`'s loop.
    func take(after settling: Duration = .milliseconds(100), on host: BluetoothHost) async -> [ScanResult] {
        try? await host.loop.sleep(for: settling)
        return gathered.take()
    }

    /// The addresses reported since the last call.
    func addresses(after settling: Duration = .milliseconds(100), on host: BluetoothHost) async -> Set<BluetoothAddress> {
        Set(await take(after: settling, on: host).map(\.address))
    }

    deinit { task.cancel() }
}

/// The scan commands a host sent, in order, read from its trace (`RecordingTransport`
/// or `Room(watchCentral:)`): each LE Set (Extended) Scan Parameters and each LE Set
/// (Extended) Scan Enable, in either command set.
final class ScanCommandLog: Sendable {
    struct Parameters: Equatable {
        var filterPolicy: UInt8
        /// Scanning_PHYs (LE Set Scan Parameters: LE 1M, 0x01).
        var phys: UInt8
        var active: Bool
        var interval: UInt16
        var window: UInt16
    }
    enum Command: Equatable {
        case parameters(Parameters)
        case enable(on: Bool, filterDuplicates: Bool)
    }
    private let sent = Mutex<[Command]>([])

    var commands: [Command] { sent.withLock { $0 } }
    /// The parameters commands alone.
    var parameters: [Parameters] { commands.compactMap { if case let .parameters(p) = $0 { p } else { nil } } }
    /// Each command as a line: "active 96/48" (interval/window in 0.625 ms), "on dup", "on all", "off".
    var lines: [String] {
        commands.map {
            switch $0 {
            case let .parameters(p): "\(p.active ? "active" : "passive") \(p.interval)/\(p.window)"
            case let .enable(on, dup): on ? (dup ? "on dup" : "on all") : "off"
            }
        }
    }

    func record(_ r: TraceRecord) {
        guard r.direction == .hostToController, case let .packet(.command(op, bytes)) = r.content else { return }
        var command: Command?
        switch op {
        case .leSetScanParameters:
            if let c = try? LESetScanParameters.decode(bytes) {
                command = .parameters(Parameters(filterPolicy: c.scanningFilterPolicy, phys: 0x01, active: c.scanType == 1, interval: c.scanInterval,
                                                 window: c.scanWindow))
            }
        case .leSetExtendedScanParameters:
            if let c = try? LESetExtendedScanParameters.decode(bytes), let p = c.phys.first {
                command = .parameters(Parameters(filterPolicy: c.scanningFilterPolicy, phys: c.scanningPHYs, active: p.scanType == 1,
                                                 interval: p.scanInterval, window: p.scanWindow))
            }
        case .leSetScanEnable:
            if let c = try? LESetScanEnable.decode(bytes) { command = .enable(on: c.scanEnable, filterDuplicates: c.filterDuplicates) }
        case .leSetExtendedScanEnable:
            if let c = try? LESetExtendedScanEnable.decode(bytes) { command = .enable(on: c.enable, filterDuplicates: c.filterDuplicates != 0) }
        default:
            break
        }
        if let command { sent.withLock { $0.append(command) } }
    }
}
