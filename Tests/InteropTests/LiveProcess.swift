// A program a test talks to while it runs: lines written to its standard input, its
// standard output collected as it comes (on its own thread, never the cooperative
// pool), and waits for what it prints that end at once when the text shows, or when
// the program exits, or after a timeout.

import Foundation
import Synchronization

final class LiveProcess: Sendable {
    private struct Waiter {
        var predicate: @Sendable (String) -> Bool
        var continuation: CheckedContinuation<Bool, Never>
    }
    private struct State {
        var output = ""
        var ended = false
        /// Whether the reading thread is to stop reading (`pauseReading`).
        var paused = false
        var waiters: [UInt64: Waiter] = [:]
        var next: UInt64 = 0
    }

    /// The state, in its own object: the reading thread holds it, not the LiveProcess
    /// (whose deinit kills a program a test forgot to stop).
    private final class Shared: Sendable {
        let state = Mutex(State())
    }

    let process: Process
    private let input: FileHandle
    private let shared = Shared()

    /// Starts `path`; stderr goes to /dev/null unless `mergeStderr`.
    init(_ path: String, _ args: [String], mergeStderr: Bool = false) throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: path)
        p.arguments = args
        let stdin = Pipe(), stdout = Pipe()
        p.standardInput = stdin
        p.standardOutput = stdout
        p.standardError = mergeStderr ? stdout : FileHandle.nullDevice
        try p.run()
        process = p
        input = stdin.fileHandleForWriting
        let reader = stdout.fileHandleForReading
        Thread.detachNewThread { [shared] in
            while true {
                // Paused: the program's writes fill the pipe and then block, as they
                // would on a terminal nobody reads. Checked every 10 ms.
                while shared.state.withLock({ $0.paused }) { usleep(10_000) }
                let d = reader.availableData
                let ready = shared.state.withLock { s -> [(CheckedContinuation<Bool, Never>, Bool)] in
                    if d.isEmpty { s.ended = true } else { s.output += String(decoding: d, as: UTF8.self) }
                    var ready: [(CheckedContinuation<Bool, Never>, Bool)] = []
                    for (id, w) in s.waiters {
                        let hit = w.predicate(s.output)
                        guard hit || s.ended else { continue }
                        ready.append((w.continuation, hit))
                        s.waiters[id] = nil
                    }
                    return ready
                }
                for (c, hit) in ready { c.resume(returning: hit) }
                if d.isEmpty { break }
            }
        }
    }

    /// Stops reading the program's output (after the read under way, if any) until
    /// `resumeReading`: a program that prints more than the pipe holds then blocks in
    /// its write.
    func pauseReading() { shared.state.withLock { $0.paused = true } }

    func resumeReading() { shared.state.withLock { $0.paused = false } }

    /// Everything printed so far.
    var output: String { shared.state.withLock { $0.output } }

    /// Writes `line` and a newline to the program's standard input.
    func send(_ line: String) {
        try? input.write(contentsOf: Data((line + "\n").utf8))
    }

    /// Closes the program's standard input (it reads end of file).
    func closeInput() {
        try? input.close()
    }

    /// Returns true once the output satisfies `predicate`; false when the program's
    /// output ends without it, or after `limit`.
    func waitForOutput(within limit: Duration = .seconds(30), _ predicate: @escaping @Sendable (String) -> Bool) async -> Bool {
        let id: UInt64 = shared.state.withLock { s in
            s.next += 1
            return s.next
        }
        return await withTaskGroup(of: Bool.self) { group in
            group.addTask { [shared] in
                    return await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
                    let now: Bool? = shared.state.withLock { s in
                        if predicate(s.output) { return true }
                        if s.ended { return false }
                        s.waiters[id] = Waiter(predicate: predicate, continuation: c)
                        return nil
                    }
                    if let now { c.resume(returning: now) }
                }
            }
            group.addTask { [shared] in
                try? await Task.sleep(for: limit)
                shared.state.withLock { $0.waiters.removeValue(forKey: id) }?.continuation.resume(returning: false)
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first && predicate(output)
        }
    }

    /// Waits (off the pool, SIGKILL after `timeout` seconds) for the program's exit
    /// status, then for the end of its output: what it printed last is in `output`
    /// (the reading thread may not have read it yet as the process exits).
    func exit(timeout: TimeInterval = 60) async -> Int32 {
        let status = await Interop.exit(of: process, timeout: timeout)
        _ = await waitForOutput(within: .seconds(10)) { _ in false }
        return status
    }

    /// Closes standard input, sends `signal` unless the program already ended, and waits
    /// (off the pool, SIGKILL after `timeout` seconds) for its exit status. SIGKILL by
    /// default: a child started from a test's worker thread inherits a signal mask in
    /// which SIGTERM is blocked (see `RootcanalProcess.stop`).
    func stop(signal: Int32 = SIGKILL, timeout: TimeInterval = 20) async -> Int32 {
        try? input.close()
        if process.isRunning { kill(process.processIdentifier, signal) }
        return await exit(timeout: timeout)
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }
}
