// Replaying a capture against a host: the transport plays the recorded controller.
// The controller's packets are injected in recorded order, each once every host
// packet recorded before it has been sent; the host's packets are checked against
// the recording as they are sent. A difference fails the transport at once with a
// `ReplayMismatch` (the frame number, both packets decoded by name), so whatever the
// host was doing fails with that reason instead of timing out later.
//
// `ReplayFlows` is the comparison a per-flow replay makes, for tests that compare two
// runs the same way.
//
// Here, with the traces, rather than in BLETesting: `btctl trace replay` serves a
// replay to any host over H4, and nothing shipped links BLETesting (which re-exports
// this module for tests).

import Foundation
import HCI
import NIOCore
import Synchronization

/// What a replay lets differ between the recording and the host under test.
public struct ReplayOptions: Sendable {
    public enum Ordering: Sendable, Equatable {
        /// Every host packet in the recorded order.
        case total
        /// In the recorded order within each flow: the commands, and each link's data
        /// (by connection handle). Between flows the host may interleave differently, as
        /// concurrent work does (a peripheral restarting its advertising while it answers
        /// the central's first requests), but never ahead of a controller packet the
        /// recorded host had received first (see `independentCommands` for the one
        /// exception). The default.
        case perFlow
    }

    public enum Trailing: Sendable, Equatable {
        /// A host packet after the recording's end is a mismatch. The default.
        case refused
        /// Accepted and dropped; a command is answered with a bare success Command Complete
        /// (a test that closes the host while it still finishes something).
        case accepted
    }

    public var ordering: Ordering
    /// Commands the host sends on its own schedule, not because of a link's traffic (a
    /// peripheral resuming its advertising when a central connects): per flow, they
    /// may go ahead of links' data (ACL data, Number Of Completed Packets) the recorded
    /// host had received first, and links' data may go ahead of their answers (Command
    /// Complete, Command Status). The recorded host's resumption may have waited behind
    /// a central's requests that reached its loop first, where the replayed one does
    /// not. Empty by default: a program's own commands (a disconnection after its
    /// notifications) follow the links' traffic it saw. `advertisingCommands` lists the
    /// advertising commands.
    public var independentCommands: Set<HCIOpcode>
    /// The legacy and extended advertising commands a host resumes advertising with.
    public static let advertisingCommands: Set<HCIOpcode> = [
        .leSetRandomAddress, .leSetAdvertisingParameters, .leSetAdvertisingData, .leSetScanResponseData, .leSetAdvertisingEnable,
        .leSetAdvertisingSetRandomAddress, .leSetExtendedAdvertisingParameters, .leSetExtendedAdvertisingData,
        .leSetExtendedScanResponseData, .leSetExtendedAdvertisingEnable,
    ]
    /// Commands the host may send or not (LE Rand, LE Encrypt, ...): left out of the
    /// recording and not checked; when the host sends one, it gets the recorded
    /// answer to the next such command, else a bare success Command Complete.
    public var ignoredCommands: Set<HCIOpcode>
    /// Addresses in the recording and what the test uses instead (a random address it
    /// fixes, a peer in another room): replaced in every recorded packet, both ways.
    public var addresses: [BluetoothAddress: BluetoothAddress]
    public var trailing: Trailing
    /// How long the host may stay silent while the recording expects a packet from it.
    public var timeout: Duration

    public init(ordering: Ordering = .perFlow, independentCommands: Set<HCIOpcode> = [], ignoredCommands: Set<HCIOpcode> = [],
                addresses: [BluetoothAddress: BluetoothAddress] = [:], trailing: Trailing = .refused, timeout: Duration = .seconds(5)) {
        self.ordering = ordering
        self.independentCommands = independentCommands
        self.ignoredCommands = ignoredCommands
        self.addresses = addresses
        self.trailing = trailing
        self.timeout = timeout
    }
}

/// Where a host left the recording.
public struct ReplayMismatch: Error, Sendable, Equatable, CustomStringConvertible {
    /// The capture's frame number (from 1) of the packet expected; one past the last
    /// frame when the recording had ended.
    public var frame: Int
    /// What the recording has there; nil when it had ended.
    public var expected: HCIPacket?
    /// What the host sent; nil when it sent nothing within the timeout.
    public var actual: HCIPacket?
    /// Both packets by name and field (the trace decoder's words).
    public var expectedDecoded: String?
    public var actualDecoded: String?
    /// How long the host was silent, when that is the mismatch.
    public var silence: Duration?

    init(frame: Int, expected: HCIPacket?, actual: HCIPacket?, silence: Duration? = nil) {
        self.frame = frame
        self.expected = expected
        self.actual = actual
        self.silence = silence
        let decoder = FrameDecoder()
        expectedDecoded = expected.map(decoder.describe)
        actualDecoded = actual.map(decoder.describe)
    }

    public var description: String {
        let want = expected.map { "\(expectedDecoded ?? "") [\($0.h4Bytes.hexString)]" } ?? "the end of the recording"
        let got: String
        if let actual { got = "\(actualDecoded ?? "") [\(actual.h4Bytes.hexString)]" } else { got = "nothing within \(silence ?? .zero)" }
        return "replay mismatch at frame \(frame): expected host to send \(want); it sent \(got)"
    }
}

/// The packets of a host's traffic grouped by flow (commands; each connection handle's
/// data), each flow in order: equal for two runs that differ only in how flows interleave.
public struct ReplayFlows: Equatable, Sendable {
    public var flows: [Int: [HCIPacket]]
    public init(_ packets: [HCIPacket]) {
        var f: [Int: [HCIPacket]] = [:]
        for p in packets { f[Self.flow(of: p), default: []].append(p) }
        flows = f
    }

    /// Commands are flow 0; ACL, SCO and ISO data one flow per type and handle.
    public static func flow(of p: HCIPacket) -> Int {
        switch p {
        case .command: return 0
        case let .acl(a): return 0x1_0000 | Int(a.handle)
        default: return 0x2_0000 | Int(p.type.rawValue) << 12 | Int(p.h4Bytes.count > 2 ? (UInt16(p.h4Bytes[1]) | UInt16(p.h4Bytes[2]) << 8) & 0x0FFF : 0)
        }
    }
}

/// A transport that plays a recorded controller to the host (see the file comment).
public final class ReplayTransport: HCITransport {
    struct Step {
        var frame: Int
        var fromHost: Bool
        var packet: HCIPacket
        var flow: Int
    }

    /// The trace's controller packets, for a host that reads a stream instead of taking
    /// `deliver(on:_:)`. Unbounded on purpose: it never holds more than the trace's own
    /// packets, which are in memory already.
    public let inbound: AsyncThrowingStream<HCIPacket, any Error>
    private let continuation: AsyncThrowingStream<HCIPacket, any Error>.Continuation
    private let steps: [Step]
    private let options: ReplayOptions
    private let lastFrame: Int
    private let state: Mutex<State>

    typealias Target = (loop: any EventLoop, receive: @Sendable (TransportInput) -> Void)

    struct State {
        var consumed: [Bool]
        /// The first step not yet played (injected, or sent by the host).
        var cursor = 0
        var canned: [HCIOpcode: [HCIPacket]] = [:]
        var failure: ReplayMismatch?
        var closed = false
        /// When the host last sent a packet the recording expected (or the replay began).
        var lastProgress = ContinuousClock.now
        /// `finished(within:)` callers, by ticket (each one's timer and cancellation wake it alone).
        var finishWaiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
        var nextFinishTicket: UInt64 = 0
        var watchdog: Task<Void, Never>?
        /// The host's loop and receiver (`deliver(on:_:)`), else packets go to `inbound`.
        var target: Target?
        /// Injected before the host attached.
        var early: [HCIPacket] = []
    }

    /// A replay of `trace` (btsnoop, pcap or pcapng, as `TraceReader` reads them).
    public init(trace: Trace, options: ReplayOptions = ReplayOptions()) {
        self.options = options
        (inbound, continuation) = AsyncThrowingStream<HCIPacket, any Error>.makeStream(bufferingPolicy: .unbounded)
        var steps: [Step] = [], canned: [HCIOpcode: [HCIPacket]] = [:]
        for (i, r) in trace.records.enumerated() {
            guard var p = r.packet, r.direction != .unknown else { continue }
            p = Self.substitute(options.addresses, in: p)
            if let op = Self.commandOpcode(p), options.ignoredCommands.contains(op) {
                if r.direction == .controllerToHost { canned[op, default: []].append(p) }
                continue
            }
            steps.append(Step(frame: i + 1, fromHost: r.direction == .hostToController, packet: p, flow: ReplayFlows.flow(of: p)))
        }
        self.steps = steps
        lastFrame = trace.records.count
        var s = State(consumed: steps.map { !$0.fromHost })
        s.canned = canned
        state = Mutex(s)
        // The recording may begin with controller packets (a capture started mid-session).
        // Kept for `deliver(on:_:)`, and in `inbound` for a reader of it (one or the other is used).
        let early = state.withLock { s -> [HCIPacket] in
            s.early = advance(&s)
            return s.early
        }
        for p in early { continuation.yield(p) }
        // Holds the transport only while it looks: a replay nobody closes still goes away.
        let timeout = options.timeout
        let watchdog = Task { [weak self] in
            var deadline = ContinuousClock.now + timeout
            while true {
                do { try await Task.sleep(until: deadline, clock: .continuous) } catch { return }
                guard let replay = self, let next = replay.silenceDeadline() else { return }
                deadline = next
            }
        }
        state.withLock { $0.watchdog = watchdog }
    }

    /// A replay of the capture at `path`.
    public convenience init(contentsOf path: String, options: ReplayOptions = ReplayOptions()) throws {
        self.init(trace: try TraceReader.read([UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))), options: options)
    }

    deinit { state.withLock { $0.watchdog?.cancel() } }

    // MARK: HCITransport

    public func send(_ packet: HCIPacket) async throws { try sendNow([packet]) }

    /// Checked at once, on the caller's thread (the host's loop): the controller
    /// packets a host packet unblocks are handed to the host in one later loop job, in
    /// order, so a replay schedules the host's work the same way every run.
    public var sendsSynchronously: Bool { true }

    public func sendNow(_ packets: [HCIPacket]) throws {
        for packet in packets {
            let (inject, failure) = state.withLock { s -> ([HCIPacket], ReplayMismatch?) in
                if let f = s.failure { return ([], f) }
                if s.closed { return ([], nil) }
                return accept(packet, &s)
            }
            hand(inject)
            if let failure {
                fail(failure)
                throw failure
            }
            if isComplete { wakeFinishWaiters() }
        }
    }

    /// The host's loop delivers what the replay injects (the usual path: a host
    /// attaches this way).
    public func deliver(on loop: any EventLoop, _ receive: @escaping @Sendable (TransportInput) -> Void) {
        let early = state.withLock { s -> [HCIPacket] in
            s.target = (loop, receive)
            defer { s.early = [] }
            return s.early
        }
        hand(early)
    }

    /// Hands controller packets to the host: on its loop when attached, else to `inbound`.
    private func hand(_ packets: [HCIPacket]) {
        guard !packets.isEmpty else { return }
        if let (loop, receive) = state.withLock({ $0.target }) {
            loop.execute { receive(.packets(packets)) }
        } else {
            for p in packets { continuation.yield(p) }
        }
    }

    public func close() async {
        let target = state.withLock { s -> Target? in
            s.closed = true
            s.watchdog?.cancel()
            // The host hears the end below; then nothing holds its handler (which holds it).
            defer { s.target = nil }
            return s.target
        }
        continuation.finish()
        if let (loop, receive) = target { loop.execute { receive(.ended(nil)) } }
        wakeFinishWaiters()
    }

    // MARK: Progress

    /// The mismatch that failed the replay, if any.
    public var mismatch: ReplayMismatch? { state.withLock { $0.failure } }

    /// Whether every recorded frame has been played.
    public var isComplete: Bool { state.withLock { $0.cursor == steps.count } }

    /// Whether the replay was closed (`close()`): it plays nothing more.
    public var isClosed: Bool { state.withLock { $0.closed } }

    /// Waits until every recorded frame has been played (the host sent all it should).
    /// Throws the `ReplayMismatch` that failed the replay, or one naming the packet still
    /// expected when `limit` passes first or the transport closes before the end;
    /// `CancellationError` when the calling task is cancelled first.
    public func finished(within limit: Duration = .seconds(5)) async throws {
        let ticket = state.withLock { s -> UInt64 in
            defer { s.nextFinishTicket &+= 1 }
            return s.nextFinishTicket
        }
        let timer = Task { [weak self] in
            try? await Task.sleep(for: limit)
            self?.wakeFinishWaiter(ticket)
        }
        defer { timer.cancel() }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let done = state.withLock { s -> Bool in
                    if s.failure != nil || s.cursor == steps.count || s.closed || Task.isCancelled { return true }
                    s.finishWaiters[ticket] = c
                    return false
                }
                if done { c.resume() }
            }
        } onCancel: {
            wakeFinishWaiter(ticket)
        }
        let (failure, cursor) = state.withLock { ($0.failure, $0.cursor) }
        if failure == nil, cursor < steps.count, Task.isCancelled { throw CancellationError() }
        if let failure { throw failure }
        if cursor < steps.count { throw ReplayMismatch(frame: steps[cursor].frame, expected: steps[cursor].packet, actual: nil, silence: limit) }
    }

    private func wakeFinishWaiters() {
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            defer { s.finishWaiters.removeAll() }
            return Array(s.finishWaiters.values)
        }
        for w in waiters { w.resume() }
    }

    /// Wakes one `finished(within:)` caller (its time ran out, or its task was cancelled).
    private func wakeFinishWaiter(_ ticket: UInt64) {
        state.withLock { $0.finishWaiters.removeValue(forKey: ticket) }?.resume()
    }

    // MARK: Playing

    /// Checks a host packet; returns the controller packets it unblocks, or the mismatch.
    private func accept(_ p: HCIPacket, _ s: inout State) -> ([HCIPacket], ReplayMismatch?) {
        if let op = Self.commandOpcode(p), options.ignoredCommands.contains(op) {
            if var answers = s.canned[op], !answers.isEmpty {
                let a = answers.removeFirst()
                s.canned[op] = answers
                return ([a], nil)
            }
            return ([Self.bareSuccess(op)], nil)
        }
        // What the recording expects next: the cursor stops at the first host packet not yet sent.
        let due = s.cursor < steps.count ? s.cursor : nil
        func refuse(expecting i: Int?) -> ([HCIPacket], ReplayMismatch?) {
            let m = ReplayMismatch(frame: i.map { steps[$0].frame } ?? lastFrame + 1, expected: i.map { steps[$0].packet }, actual: p)
            s.failure = m
            return ([], m)
        }
        let flow = ReplayFlows.flow(of: p)
        let candidate = (s.cursor..<steps.count).first {
            steps[$0].fromHost && !s.consumed[$0] && (options.ordering == .total || steps[$0].flow == flow)
        }
        guard let i = candidate else {
            if due == nil, options.trailing == .accepted {
                return (Self.commandOpcode(p).map { [Self.bareSuccess($0)] } ?? [], nil)
            }
            // Nothing more of this flow.
            return refuse(expecting: due)
        }
        // Causality holds in either ordering: the host may not send what the recorded host
        // sent only after a controller packet that has not been delivered yet (per flow,
        // `independentCommands` excepted).
        let total = options.ordering == .total
        if (s.cursor..<i).contains(where: { !steps[$0].fromHost && (total || mayCause(steps[$0].packet, p)) }) {
            return refuse(expecting: due)
        }
        guard steps[i].packet == p else { return refuse(expecting: i) }
        s.consumed[i] = true
        s.lastProgress = ContinuousClock.now
        return (advance(&s), nil)
    }

    /// Moves the cursor past what has been played; returns the controller packets it passes.
    private func advance(_ s: inout State) -> [HCIPacket] {
        var out: [HCIPacket] = []
        while s.cursor < steps.count {
            let step = steps[s.cursor]
            if step.fromHost {
                guard s.consumed[s.cursor] else { break }
            } else {
                out.append(step.packet)
            }
            s.cursor += 1
        }
        return out
    }

    private func fail(_ m: ReplayMismatch) {
        continuation.finish(throwing: m)
        if let (loop, receive) = state.withLock({ $0.target }) { loop.execute { receive(.ended(m)) } }
        wakeFinishWaiters()
    }

    /// When the watchdog should look next: `timeout` after the host's last expected
    /// packet. Fails the replay when that moment has passed with a packet of the host's
    /// due; nil when there is nothing more to watch.
    private func silenceDeadline() -> ContinuousClock.Instant? {
        let verdict = state.withLock { s -> Result<ContinuousClock.Instant, ReplayMismatch>? in
            guard s.failure == nil, !s.closed, s.cursor < steps.count else { return nil }
            let deadline = s.lastProgress + options.timeout
            guard ContinuousClock.now >= deadline else { return .success(deadline) }
            let step = steps[s.cursor]
            let m = ReplayMismatch(frame: step.frame, expected: step.packet, actual: nil, silence: options.timeout)
            s.failure = m
            return .failure(m)
        }
        switch verdict {
        case nil: return nil
        case let .success(deadline)?: return deadline
        case let .failure(m)?:
            fail(m)
            return nil
        }
    }

    // MARK: Helpers

    /// Whether the recorded controller packet `c`, before the host packet `p`, counts as
    /// a possible cause of `p` when flows may interleave: always, except between links'
    /// data and the `independentCommands` (see there) with their answers.
    private func mayCause(_ c: HCIPacket, _ p: HCIPacket) -> Bool {
        let independent = options.independentCommands
        guard !independent.isEmpty else { return true }
        switch (c, p) {
        case let (.acl, .command(opcode, _)): return !independent.contains(opcode)
        case let (.event(code, _), .command(opcode, _)) where code == .numberOfCompletedPackets: return !independent.contains(opcode)
        case (.event, .acl): return Self.commandOpcode(c).map { !independent.contains($0) } ?? true
        default: return true
        }
    }

    static func commandOpcode(_ p: HCIPacket) -> HCIOpcode? {
        switch p {
        case let .command(opcode, _): return opcode
        case .event:
            switch try? HCIEvent(p) {
            case let .commandComplete(c)?: return c.commandOpcode
            case let .commandStatus(c)?: return c.commandOpcode
            default: return nil
            }
        default: return nil
        }
    }

    static func bareSuccess(_ op: HCIOpcode) -> HCIPacket {
        HCIEvent.commandComplete(CommandComplete(commandOpcode: op, returnParameters: [HCIStatus.success.rawValue])).packet
    }

    /// `p` with every recorded address (6 bytes, little-endian) replaced.
    static func substitute(_ addresses: [BluetoothAddress: BluetoothAddress], in p: HCIPacket) -> HCIPacket {
        guard !addresses.isEmpty else { return p }
        var bytes = p.h4Bytes
        for (from, to) in addresses {
            let f = from.bytes, t = to.bytes
            var i = 1
            while i + 6 <= bytes.count {
                if Array(bytes[i..<i + 6]) == f {
                    bytes.replaceSubrange(i..<i + 6, with: t)
                    i += 6
                } else {
                    i += 1
                }
            }
        }
        return (try? HCIPacket(h4: bytes)) ?? p
    }
}

