// Reading a scan in a test without holding up the test: the results the host has
// handed the scan's stream, taken on request.

import BLE
@testable import HCI
import Snoop
import Synchronization

/// Holds a scan's stream (letting go of it would stop the scan) and hands over what
/// the host reported on it since the last look.
final class ScanReader: Sendable {
    private let stream: BufferedStream<ScanResult>

    init(_ stream: BufferedStream<ScanResult>) { self.stream = stream }

    /// What was reported since the last call. Without `settling`, what the controller
    /// reported before now: the loop runs what it has queued (the controller's reports
    /// on the way to the host), and the host hands each report to the stream as it
    /// takes it. With `settling`, after that much of `host`'s loop's time too (for
    /// what comes on a timer: a private address's rotation).
    func take(after settling: Duration? = nil, on host: BluetoothHost) async -> [ScanResult] {
        if let settling { try? await host.loop.sleep(for: settling) }
        try? await host.loop.submit {}.get()
        return stream.takeBuffered()
    }

    /// The addresses reported since the last call.
    func addresses(after settling: Duration? = nil, on host: BluetoothHost) async -> Set<BluetoothAddress> {
        Set(await take(after: settling, on: host).map(\.address))
    }
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

    /// Waits until `condition` holds of `lines` (the host sends its commands on its own
    /// time: a scan that ends is stopped from its stream's end), up to `limit`; false
    /// if it never did.
    func wait(within limit: Duration = .seconds(10), until condition: @escaping @Sendable ([String]) -> Bool) async -> Bool {
        // The controller has taken each enable sent too: what the test does next meets
        // the controller scanning as the lines say.
        await changes.wait(within: limit) { [self] in
            let enables = commands.count { if case .enable = $0 { true } else { false } }
            return condition(lines) && answers.count(of: .leSetScanEnable) + answers.count(of: .leSetExtendedScanEnable) >= enables
        }
    }

    private let answers = CommandAnswers()
    private let changes = Waiters()

    func record(_ r: TraceRecord) {
        defer { changes.changed() }
        answers.record(r)
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

/// The commands a controller has answered (Command Complete or Command Status), by
/// opcode, read from a host's trace as `ScanCommandLog` reads it: for a test that
/// waits until the controller has taken a command the host sends on its own time.
final class CommandAnswers: Sendable {
    private let answered = Mutex<[HCIOpcode: Int]>([:])
    private let changes = Waiters()

    func count(of op: HCIOpcode) -> Int { answered.withLock { $0[op] ?? 0 } }

    func record(_ r: TraceRecord) {
        defer { changes.changed() }
        guard r.direction == .controllerToHost, case let .packet(.event(code, p)) = r.content else { return }
        // Command Complete: Num_HCI_Command_Packets, opcode; Command Status: status,
        // Num_HCI_Command_Packets, opcode (§7.7.14, §7.7.15).
        let at = code == .commandComplete ? 1 : code == .commandStatus ? 2 : nil
        guard let at, p.count >= at + 2 else { return }
        let op = HCIOpcode(rawValue: UInt16(p[at]) | UInt16(p[at + 1]) << 8)
        answered.withLock { $0[op, default: 0] += 1 }
    }

    /// Waits until the controller has answered `op` `count` times, up to `limit`; false if it never did.
    func wait(for op: HCIOpcode, count: Int = 1, within limit: Duration = .seconds(10)) async -> Bool {
        await changes.wait(within: limit) { self.count(of: op) >= count }
    }
}

/// Waits on a condition over what a log has recorded, looked at each time the log
/// records something (`changed()`), never on a timer: the one waiting place
/// `ScanCommandLog.wait` and `CommandAnswers.wait` share.
private final class Waiters: Sendable {
    private struct Waiter {
        let condition: @Sendable () -> Bool
        let resume: CheckedContinuation<Bool, Never>
    }
    private struct State {
        var next = 0
        var all: [Int: Waiter] = [:]
        /// Waits that began and have not looked yet, and those of them that ended
        /// (deadline, cancellation) before they looked.
        var starting: Set<Int> = []
        var ended: Set<Int> = []
    }
    private let waiting = Mutex(State())

    /// Whether `condition` comes to hold within `limit`: true at once if it holds now,
    /// else at the first `changed()` after which it holds; false when `limit` of
    /// wall-clock time (the host runs on its own threads) passes first, or the task is
    /// cancelled.
    func wait(within limit: Duration, until condition: @escaping @Sendable () -> Bool) async -> Bool {
        let id = waiting.withLock { w in
            w.next += 1
            w.starting.insert(w.next)
            return w.next
        }
        let deadline = Task {
            guard (try? await Task.sleep(for: limit)) != nil else { return }
            self.end(id)
        }
        defer { deadline.cancel() }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { resume in
                // Looked at under the lock `changed()` takes: a record between this
                // look and the waiter's entry cannot go unseen.
                let now = waiting.withLock { w -> Bool? in
                    w.starting.remove(id)
                    if w.ended.remove(id) != nil { return false }
                    if condition() { return true }
                    w.all[id] = Waiter(condition: condition, resume: resume)
                    return nil
                }
                if let now { resume.resume(returning: now) }
            }
        } onCancel: {
            end(id)
        }
    }

    /// Something was recorded: each waiter whose condition now holds goes on.
    func changed() {
        let done = waiting.withLock { w -> [CheckedContinuation<Bool, Never>] in
            let ids = w.all.filter { $0.value.condition() }.map(\.key)
            return ids.compactMap { w.all.removeValue(forKey: $0)?.resume }
        }
        for d in done { d.resume(returning: true) }
    }

    /// The wait `id` ends with false, now or (not entered yet) as it enters; nothing
    /// if it already went on.
    private func end(_ id: Int) {
        let waiter = waiting.withLock { w -> Waiter? in
            if let waiter = w.all.removeValue(forKey: id) { return waiter }
            if w.starting.contains(id) { w.ended.insert(id) }
            return nil
        }
        waiter?.resume.resume(returning: false)
    }
}
