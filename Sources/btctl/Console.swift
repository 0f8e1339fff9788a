// The console btctl commands read on standard input (`gatt serve`, `shell`): lines
// read off the cooperative pool with back-pressure, commands queued in order with a
// bound, pairing prompts answered by the next line.

import Foundation
import HCI
import Snoop
import Synchronization

/// Lines from standard input, one at a time: the reading thread waits until the
/// command before is done (back-pressure, nothing buffered beyond one line). Ends at
/// end of file, or at once when btctl runs in the background of a terminal (reading
/// would stop the job with SIGTTIN; with SIGTTIN ignored the read fails instead).
/// Reads file descriptor 0 itself, not through stdio: `readLine` would hold stdin's
/// stdio lock while it waits, and `fflush(nil)` after each printed event takes every
/// stream's lock, so printing would hang until a line came.
enum StandardInputLines {
    static func start() -> (lines: AsyncStream<String>, done: @Sendable () -> Void) {
        let (lines, continuation) = AsyncStream.makeStream(of: String.self, bufferingPolicy: .bufferingOldest(1))
        let taken = DispatchSemaphore(value: 0)
        _ = Glibc.signal(SIGTTIN, SIG_IGN)
        Thread.detachNewThread {
            var pending: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 4096)
            func deliver(_ line: ArraySlice<UInt8>) {
                var text = String(decoding: line, as: UTF8.self)
                if text.hasSuffix("\r") { text.removeLast() }
                continuation.yield(text)
                taken.wait()
            }
            reading: while true {
                let n = chunk.withUnsafeMutableBytes { Glibc.read(0, $0.baseAddress, $0.count) }
                if n < 0, errno == EINTR { continue }
                guard n > 0 else { break reading }  // end of input, or EIO in the background
                pending += chunk[..<n]
                while let newline = pending.firstIndex(of: 0x0A) {
                    deliver(pending[..<newline])
                    pending.removeSubrange(...newline)
                }
                // A line longer than 64 KiB is not a command: deliver it to be refused.
                if pending.count > 65_536 {
                    deliver(pending[...])
                    pending.removeAll()
                }
            }
            if !pending.isEmpty { deliver(pending[...]) }
            continuation.finish()
        }
        return (lines, { taken.signal() })
    }
}

/// A console command's event, said at once: a JSON line with --json; otherwise the
/// text on standard output, or on standard error for an `error` event.
func consoleReport(json: Bool, _ o: [(String, JSONValue)], _ text: String) {
    if json {
        emit(.object(o))
    } else if o.first?.1 == .string("error") {
        FileHandle.standardError.write(Data("\(text)\n".utf8))
    } else {
        print(text)
    }
    fflush(nil)
}

/// A console on standard input (`gatt serve`, `shell`): commands one per line, run one
/// after another.
enum Console {
    /// Runs the lines typed on standard input with `run` until it returns true (`quit`:
    /// returns true) or the input ends (false). While a pairing prompt waits, the next
    /// line answers it, even while a command runs (an `indicate` waiting for a central
    /// that pairs before it confirms, a `read` that pairs on demand): the console reads
    /// on while commands run, up to `ConsoleCommands.limit` typed ahead. At the end of
    /// input a waiting prompt is refused at once, and the commands typed before it still run.
    static func run(answers: ConsoleAnswers, _ run: @escaping @Sendable (String) async -> Bool) async -> Bool {
        let (lines, done) = StandardInputLines.start()
        let commands = ConsoleCommands()
        return await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                for await line in lines {
                    if answers.offer(line) { done() } else { commands.push(line, release: done) }
                }
                // Nobody is left to answer a prompt.
                answers.close()
                commands.end()
                return false
            }
            group.addTask {
                while let line = await commands.next() {
                    if await run(line) { return true }
                }
                return false
            }
            // The reader ends first at the end of input (then the commands before
            // it run); `quit` ends the console with the reader still waiting.
            var quit = false
            for await q in group where q {
                quit = true
                group.cancelAll()
            }
            return quit
        }
    }

    /// A word of a console line naming an attribute: a handle (`0x0012`) or a UUID.
    static func target(_ word: String) throws(CLIError) -> ServeCommand.Target {
        if word.lowercased().hasPrefix("0x") {
            guard let h = UInt16(hexDigits: word.dropFirst(2)), h > 0 else { throw CLIError("'\(word)' is not a handle (0x0001 to 0xFFFF)") }
            return .handle(h)
        }
        guard let u = BluetoothUUID(word) else { throw CLIError("'\(word)' is neither a UUID (2A19, or 128-bit) nor a handle (0x0012)") }
        return .uuid(u)
    }

    /// The rest of a console line as a value: hex bytes or "quoted text" (UTF-8).
    static func value(_ text: String) throws(CLIError) -> [UInt8] {
        let t = text.trimmingCharacters(in: .whitespaces)
        if t.count >= 2, t.hasPrefix("\""), t.hasSuffix("\"") { return Array(t.dropFirst().dropLast().utf8) }
        var hex = t
        if hex.lowercased().hasPrefix("0x") { hex.removeFirst(2) }
        guard !hex.isEmpty, let b = [UInt8](hex: hex) else { throw CLIError("'\(t)' is neither hex bytes nor \"quoted text\"") }
        return b
    }
}

/// The console's commands waiting for the one that runs: lines are taken in order;
/// while `limit` wait, the line that would exceed it keeps its reader waiting (its
/// `release` is called once a command is taken), so nothing is dropped and nothing
/// unbounded is kept.
final class ConsoleCommands: Sendable {
    static let limit = 16
    private struct State {
        var lines: [String] = []
        var held: (@Sendable () -> Void)?
        var taker: CheckedContinuation<String?, Never>?
        var ended = false
    }
    private let state = Mutex(State())

    /// Queues `line`; `release` lets the reader read on, at once unless the queue is full.
    func push(_ line: String, release: @escaping @Sendable () -> Void) {
        let (taker, releaseNow) = state.withLock { s -> (CheckedContinuation<String?, Never>?, Bool) in
            if s.ended { return (nil, true) }
            if let t = s.taker {
                s.taker = nil
                return (t, true)
            }
            s.lines.append(line)
            if s.lines.count < Self.limit { return (nil, true) }
            s.held = release
            return (nil, false)
        }
        taker?.resume(returning: line)
        if releaseNow { release() }
    }

    /// The oldest waiting line; nil once `end` was called and none is left.
    func next() async -> String? {
        await withCheckedContinuation { (c: CheckedContinuation<String?, Never>) in
            let (line, held) = state.withLock { s -> (String??, (@Sendable () -> Void)?) in
                if !s.lines.isEmpty {
                    defer { s.held = nil }
                    return (s.lines.removeFirst(), s.held)
                }
                if s.ended { return (.some(nil), nil) }
                s.taker = c
                return (nil, nil)
            }
            held?()
            if let line { c.resume(returning: line) }
        }
    }

    /// No more lines come: `next` returns what waits, then nil.
    func end() {
        let taker = state.withLock { s -> CheckedContinuation<String?, Never>? in
            s.ended = true
            defer { s.taker = nil }
            return s.taker
        }
        taker?.resume(returning: nil)
    }
}
