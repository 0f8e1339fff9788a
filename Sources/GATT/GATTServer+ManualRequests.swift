// The GATT server's manual handles: reads and writes of values the application
// answers itself (`GATTServer.setManual(_:)`), handed out as `GATTServer.Request`s
// by stream or handler, each answered within `manualTimeout` (Vol 3, Part F, §3.4.4,
// §3.4.5, §3.4.6 for what each request carries).

import ATT
import HCI
import L2CAP
import NIOCore

extension GATTServer {
    /// A read or write of a value the application answers itself (`setManual(_:)`).
    public struct Request: Hashable, Sendable {
        public enum Kind: Hashable, Sendable {
            /// Read Request (offset 0) or Read Blob Request.
            case read(offset: Int)
            /// Write Request (`withResponse`) or Write Command.
            case write(value: [UInt8], withResponse: Bool)
        }
        public var id: UInt64
        public var connection: UInt16
        public var handle: UInt16
        public var kind: Kind
    }

    /// Hands each request for a manual handle to `handler`, synchronously on the loop as
    /// the server takes it, instead of to `requests` (nothing buffered, nothing
    /// dropped): for a layer on the same loop (the facade). The handler may answer at
    /// once (`respond(to:with:)`).
    public func setRequestHandler(_ handler: @escaping @Sendable (Request) -> Void) { requestHandler = handler }

    /// Hands `r` to the handler or the stream; the error to answer it with at once when
    /// the stream refused it (full, or its consumer gone), nil when it was taken.
    @discardableResult
    private func hand(_ r: Request) -> ATTErrorCode? {
        if let requestHandler {
            requestHandler(r)
            return nil
        }
        switch requestContinuation.yield(r) {
        case .enqueued: return nil
        case .dropped: return .insufficientResources
        case .terminated: return .unlikelyError
        }
    }

    /// Value handles whose reads and writes go to `requests` instead of the database:
    /// Read, Read Blob, Read By Type, Read Multiple (Variable), Write Request and Command,
    /// a verified Signed Write, and an executed long or reliable write (one request with
    /// the whole value). Permissions are still checked first; the application never sees
    /// a request the peer could not make.
    public func setManual(_ handles: Set<UInt16>) { manual = handles }

    /// How long the application has to answer (default 20 s).
    public func setManualTimeout(_ d: Duration) { manualTimeout = d }

    /// Answers request `id`: a read with the whole value (the server applies a Read
    /// Blob's offset and the MTU), a write with `[]`; or an ATT error code. Unknown or
    /// already answered ids are ignored.
    public func respond(to id: UInt64, with result: Result<[UInt8], ATTErrorCode>) {
        pending.removeValue(forKey: id)?.resume(returning: result)
    }

    /// Whether request `id` still waits for its answer.
    public func isPending(_ id: UInt64) -> Bool { pending[id] != nil }

    private func ask(_ connection: UInt16, _ handle: UInt16, _ kind: Request.Kind) async -> Result<[UInt8], ATTErrorCode> {
        let id = nextRequest
        nextRequest += 1
        // The loop's time, as every timer of the stack: unanswered, the request fails.
        let timer = LoopTimer(after: manualTimeout, on: loop) { [weak self] in
            self?.onLoop(id) { $0.respond(to: $1, with: .failure(.unlikelyError)) }
        }
        defer { timer.cancel() }
        return await withCheckedContinuation { c in
            pending[id] = c
            if let refused = hand(Request(id: id, connection: connection, handle: handle, kind: kind)) {
                respond(to: id, with: .failure(refused))
            }
        }
    }

    /// Answers a request on a manual handle, if `pdu` is one; false otherwise.
    func serveManually(_ pdu: ATTPDU, connection: UInt16, bearer: ATTBearer) async -> Bool {
        let sec = linkSecurity(connection)
        func fail(_ code: ATTErrorCode, _ h: UInt16) async { await bearer.respond(.errorResponse(request: pdu.opcode, handle: h, error: code)) }
        switch pdu {
        case let .readRequest(h) where manual.contains(h), let .readBlobRequest(h, _) where manual.contains(h):
            guard let a = state.database.attribute(h) else { return false }
            if let code = state.readDenied(a, sec) { await fail(code, h); return true }
            var offset = 0
            if case let .readBlobRequest(_, o) = pdu { offset = Int(o) }
            let mtu = await bearer.mtu
            switch await ask(connection, h, .read(offset: offset)) {
            case let .failure(code): await fail(code, h)
            case let .success(v) where offset > v.count: await fail(.invalidOffset, h)
            case let .success(v):
                let piece = Array(v[offset...].prefix(mtu - 1))
                await bearer.respond(offset == 0 && pdu.opcode == .readRequest ? .readResponse(value: piece) : .readBlobResponse(value: piece))
            }
            return true
        case let .writeRequest(h, v) where manual.contains(h):
            if let code = state.writeDenied(h, v, sec, connection: connection) { await fail(code, h); return true }
            switch await ask(connection, h, .write(value: v, withResponse: true)) {
            case let .failure(code): await fail(code, h)
            case .success: await bearer.respond(.writeResponse)
            }
            return true
        case .writeCommand:
            return takeManualCommand(pdu, connection: connection)
        case .executeWriteRequest(flags: 1) where state.preparedHandles(connection: connection).contains(where: manual.contains):
            // A long or reliable write: every value built and checked first; the
            // application then accepts or refuses each of its own whole, and only when it
            // has accepted them all are the others written (§3.4.6.3).
            let writes: [(handle: UInt16, value: [UInt8])]
            switch state.takePreparedWrites(connection: connection) {
            case let .failure(refusal): await fail(refusal.error, refusal.handle); return true
            case let .success(w): writes = w
            }
            for w in writes where manual.contains(w.handle) {
                if case let .failure(code) = await ask(connection, w.handle, .write(value: w.value, withResponse: true)) {
                    await fail(code, w.handle)
                    return true
                }
            }
            var effects: [GATTServerState.Effect] = []
            for w in writes where !manual.contains(w.handle) { effects += state.commitWrite(w.value, at: w.handle, connection: connection) }
            await bearer.respond(.executeWriteResponse)
            report(effects, response: .executeWriteResponse, connection: connection)
            return true
        case .readByTypeRequest, .readMultipleRequest, .readMultipleVariableRequest:
            let handles = manualReads(pdu, sec)
            guard !handles.isEmpty else { return false }
            // The application's values stand in for the stored ones, each asked in turn.
            var supplied: GATTServerState.SuppliedValues = [:]
            for h in handles { supplied[h] = await ask(connection, h, .read(offset: 0)) }
            await answer(pdu, connection: connection, bearer: bearer, supplied: supplied)
            return true
        default:
            return false
        }
    }

    /// The manual handles a Read By Type, Read Multiple or Read Multiple Variable Request
    /// would read on a link with `security`, in order: none when the request is refused
    /// before it reaches one, so the application is not asked for a value no answer
    /// could carry.
    private func manualReads(_ pdu: ATTPDU, _ security: LinkSecurity) -> [UInt16] {
        switch pdu {
        case let .readByTypeRequest(s, e, type) where s != 0 && s <= e:
            var out: [UInt16] = []
            for a in state.database.attributes(in: s...e) where a.type == type {
                if state.readDenied(a, security) != nil { break }
                if manual.contains(a.handle) { out.append(a.handle) }
            }
            return out
        case let .readMultipleRequest(handles), let .readMultipleVariableRequest(handles):
            let readable = handles.allSatisfy { h in state.database.attribute(h).map { state.readDenied($0, security) == nil } ?? false }
            return readable ? handles.filter(manual.contains) : []
        default:
            return []
        }
    }

    /// Hands a Write Command on a manual handle to `requests` (nothing to answer; one
    /// the link's security does not allow is ignored, §3.4.5.3), synchronously, so
    /// commands reach the application in the order they came. False when `pdu` is not one.
    func takeManualCommand(_ pdu: ATTPDU, connection: UInt16) -> Bool {
        guard case let .writeCommand(h, v) = pdu, manual.contains(h) else { return false }
        guard state.writeDenied(h, v, linkSecurity(connection), connection: connection) == nil else { return true }
        handOver(v, at: h, connection: connection)
        return true
    }

    /// A write that needs no answer, handed to the application as a Write Command is.
    func handOver(_ value: [UInt8], at handle: UInt16, connection: UInt16) {
        let id = nextRequest
        nextRequest += 1
        hand(Request(id: id, connection: connection, handle: handle, kind: .write(value: value, withResponse: false)))
    }

    func isManual(_ pdu: ATTPDU, connection: UInt16) -> Bool {
        guard !manual.isEmpty else { return false }
        switch pdu {
        case let .readRequest(h), let .readBlobRequest(h, _), let .writeRequest(h, _), let .writeCommand(h, _): return manual.contains(h)
        case .executeWriteRequest(flags: 1): return state.preparedHandles(connection: connection).contains(where: manual.contains)
        case .readByTypeRequest, .readMultipleRequest, .readMultipleVariableRequest:
            return !manualReads(pdu, linkSecurity(connection)).isEmpty
        default: return false
        }
    }
}
