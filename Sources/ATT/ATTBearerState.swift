// The ATT bearer's rules (Core Specification v5.4, Vol 3, Part F, §3.3, §3.4.2, §3.4.7),
// sans I/O: PDUs and timer expiries go in, events come out; one actor executes them.
//
//   - One request outstanding from each side: our further requests queue; one
//     indication outstanding from us, further ones queue until the confirmation.
//   - A transaction not completed in 30 s (§3.3.3) times out; the bearer is then
//     unusable: everything pending fails and nothing more is sent.
//   - ATT_MTU = min(client Rx MTU, server Rx MTU), at least 23 (§3.4.2).
//   - From the peer: a malformed request gets Error Response (Invalid PDU), an
//     unsupported request Request Not Supported, an unknown command is ignored.

import HCI

public enum ATTBearerError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The peer answered with Error Response.
    case errorResponse(request: ATTOpcode, handle: UInt16, error: ATTErrorCode)
    /// No response within the transaction timeout; the bearer is now unusable.
    case transactionTimeout(ATTOpcode)
    /// An earlier timeout (or the link going away) made the bearer unusable.
    case bearerUnusable(String)
    /// The peer's response could not be decoded.
    case malformedResponse(ATTDecodeError)
    /// The peer answered our outstanding `request` with a response of another kind
    /// (`received`), or with an Error Response for another request (`errorFor`).
    case unexpectedResponse(received: ATTOpcode, errorFor: ATTOpcode?, request: ATTOpcode)

    public var description: String {
        switch self {
        case let .errorResponse(req, h, e): return "\(req) on handle 0x\(hex4(h)): \(e)"
        case let .transactionTimeout(op): return "\(op): no response within 30 s; the ATT bearer is unusable"
        case let .bearerUnusable(why): return "the ATT bearer is unusable: \(why)"
        case let .malformedResponse(e): return "\(e)"
        case let .unexpectedResponse(received, errorFor?, request):
            return "the peer answered \(request) with \(received) for \(errorFor)"
        case let .unexpectedResponse(received, nil, request): return "the peer answered \(request) with \(received)"
        }
    }
}

public struct ATTBearerState: Sendable {
    public enum Event: Hashable, Sendable {
        /// Put these bytes on the bearer (L2CAP CID 0x0004 or the kernel ATT socket).
        case send([UInt8])
        /// Arm the 30 s transaction timer for `id`; call `timedOut(id:)` when it fires.
        case startTimer(UInt64)
        case cancelTimer(UInt64)
        /// Our request `id` finished.
        case responded(id: UInt64, ATTPDU)
        case failed(id: UInt64, ATTBearerError)
        /// Our indication `id` was confirmed.
        case confirmed(id: UInt64)
        /// A request from the peer; answer it with `respond(_:)`.
        case request(ATTPDU)
        /// A command from the peer (Write Command, Signed Write Command).
        case command(ATTPDU)
        case notification(handle: UInt16, value: [UInt8])
        /// An indication from the peer; call `confirm()` once it is handled.
        case indication(handle: UInt16, value: [UInt8])
        case mtuChanged(Int)
        /// The peer broke a rule we can only note (an unexpected response, a second request).
        case protocolViolation(String)
    }

    public static let defaultMTU = 23
    public static let transactionTimeout: Duration = .seconds(30)

    /// Our receive MTU, offered in Exchange MTU (both roles).
    public let localRxMTU: UInt16
    public private(set) var mtu: Int = ATTBearerState.defaultMTU
    public private(set) var unusableReason: String?

    private struct Outgoing: Sendable {
        var id: UInt64
        var pdu: ATTPDU
    }
    private var nextID: UInt64 = 1
    private var request: Outgoing?
    private var requestQueue: [Outgoing] = []  // short: one per waiting caller
    /// Whether requests wait behind the outstanding one (each goes once the one before
    /// it is answered).
    public var hasQueuedRequests: Bool { !requestQueue.isEmpty }
    private var indication: Outgoing?
    private var indicationQueue: [Outgoing] = []
    private var peerRequestOpen = false

    /// An enhanced bearer (EATT, over an L2CAP enhanced credit-based channel): its
    /// ATT_MTU is the channel's (the smaller of both sides' MTUs), never exchanged.
    public let enhanced: Bool

    public init(localRxMTU: UInt16 = 517) {
        self.localRxMTU = Swift.max(23, localRxMTU)
        self.enhanced = false
    }

    /// An enhanced bearer whose ATT_MTU is `mtu` (on EATT it follows the L2CAP
    /// channel's MTU, at least 64; Exchange MTU is not used).
    public init(enhancedMTU mtu: Int) {
        self.localRxMTU = UInt16(clamping: mtu)
        self.mtu = Swift.max(Self.defaultMTU, mtu)
        self.enhanced = true
    }

    // MARK: Outgoing

    /// Sends a request (or queues it behind the outstanding one). Commands and
    /// notifications go through `sendUnacknowledged`.
    public mutating func sendRequest(_ pdu: ATTPDU) -> (id: UInt64, events: [Event]) {
        let id = takeID()
        if let unusableReason { return (id, [.failed(id: id, .bearerUnusable(unusableReason))]) }
        let o = Outgoing(id: id, pdu: pdu)
        guard request == nil else {
            requestQueue.append(o)
            return (id, [])
        }
        request = o
        return (id, [.send(pdu.bytes), .startTimer(id)])
    }

    /// Sends an indication (one outstanding; further ones queue).
    public mutating func sendIndication(handle: UInt16, value: [UInt8]) -> (id: UInt64, events: [Event]) {
        let id = takeID()
        if let unusableReason { return (id, [.failed(id: id, .bearerUnusable(unusableReason))]) }
        let o = Outgoing(id: id, pdu: .handleValueIndication(handle: handle, value: value))
        guard indication == nil else {
            indicationQueue.append(o)
            return (id, [])
        }
        indication = o
        return (id, [.send(o.pdu.bytes), .startTimer(id)])
    }

    /// Commands and notifications: no answer, no transaction. Empty when unusable.
    public func sendUnacknowledged(_ pdu: ATTPDU) -> [Event] {
        unusableReason == nil ? [.send(pdu.bytes)] : []
    }

    /// Answers the peer's open request.
    public mutating func respond(_ pdu: ATTPDU) -> [Event] {
        guard unusableReason == nil else { return [] }
        peerRequestOpen = false
        return [.send(pdu.bytes)]
    }

    /// Confirms the peer's indication.
    public mutating func confirm() -> [Event] {
        unusableReason == nil ? [.send(ATTPDU.handleValueConfirmation.bytes)] : []
    }

    // MARK: Incoming

    public mutating func receive(_ bytes: [UInt8]) -> [Event] { receive(bytes[...]) }

    /// One PDU from the peer, as a slice of the frame it came in (decoded in place).
    public mutating func receive(_ bytes: ArraySlice<UInt8>) -> [Event] {
        guard unusableReason == nil else { return [] }
        let pdu: ATTPDU
        do { pdu = try ATTPDU(bytes: bytes) } catch let e as ATTDecodeError {
            switch e.opcode.kind {
            case .request:
                return [.send(ATTPDU.errorResponse(request: e.opcode, handle: 0, error: .invalidPDU).bytes), .protocolViolation("\(e)")]
            case .response:
                if let r = request, Self.answers(e.opcode, r.pdu.opcode) {
                    return finishRequest(.failed(id: r.id, .malformedResponse(e)))
                }
                return [.protocolViolation("\(e)")]
            default:
                return [.protocolViolation("\(e)")]
            }
        } catch {
            return [.protocolViolation("\(error)")]
        }
        // §3.2.8: no PDU may exceed ATT_MTU; a request that does is answered Invalid PDU
        // (a Prepare Write Request, echoed, would otherwise come back longer than ATT_MTU).
        if bytes.count > mtu, pdu.opcode.kind == .request {
            return [.send(ATTPDU.errorResponse(request: pdu.opcode, handle: 0, error: .invalidPDU).bytes),
                    .protocolViolation("\(pdu.opcode) of \(bytes.count) bytes; ATT_MTU is \(mtu)")]
        }
        switch pdu.opcode.kind {
        case .response:
            guard let r = request else { return [.protocolViolation("\(pdu.opcode) without a request")] }
            // A response that does not answer the outstanding request ends it with an
            // error naming what came (as BlueZ does), rather than leaving it to the 30 s
            // timeout; the bearer stays usable.
            if case let .errorResponse(req, h, err) = pdu {
                guard req == r.pdu.opcode else {
                    return finishRequest(.failed(id: r.id, .unexpectedResponse(received: pdu.opcode, errorFor: req, request: r.pdu.opcode)))
                }
                return finishRequest(.failed(id: r.id, .errorResponse(request: req, handle: h, error: err)))
            }
            guard Self.answers(pdu.opcode, r.pdu.opcode) else {
                return finishRequest(.failed(id: r.id, .unexpectedResponse(received: pdu.opcode, errorFor: nil, request: r.pdu.opcode)))
            }
            // One array per response: concatenating onto an empty one allocated a second.
            if case let .exchangeMTUResponse(serverRx) = pdu, case let .exchangeMTURequest(clientRx) = r.pdu {
                return setMTU(client: clientRx, server: serverRx) + finishRequest(.responded(id: r.id, pdu))
            }
            return finishRequest(.responded(id: r.id, pdu))
        case .request:
            if case let .exchangeMTURequest(clientRx) = pdu {
                // Not on an enhanced bearer, whose ATT_MTU is its channel's.
                if enhanced { return [.send(ATTPDU.errorResponse(request: pdu.opcode, handle: 0, error: .requestNotSupported).bytes)] }
                return [.send(ATTPDU.exchangeMTUResponse(serverRxMTU: localRxMTU).bytes)] + setMTU(client: clientRx, server: localRxMTU)
            }
            if case .unknown = pdu {
                return [.send(ATTPDU.errorResponse(request: pdu.opcode, handle: 0, error: .requestNotSupported).bytes)]
            }
            defer { peerRequestOpen = true }
            if peerRequestOpen { return [.protocolViolation("\(pdu.opcode) before the previous request was answered"), .request(pdu)] }
            return [.request(pdu)]
        case .command:
            if case .unknown = pdu { return [] }  // §3.4.8: unknown commands are ignored
            return [.command(pdu)]
        case .notification:
            if case let .handleValueNotification(h, v) = pdu { return [.notification(handle: h, value: v)] }
            if case let .multipleHandleValueNotification(list) = pdu { return list.map { .notification(handle: $0.handle, value: $0.value) } }
            return []
        case .indication:
            if case let .handleValueIndication(h, v) = pdu { return [.indication(handle: h, value: v)] }
            return []
        case .confirmation:
            guard let i = indication else { return [.protocolViolation("Handle Value Confirmation without an indication")] }
            indication = nil
            var events: [Event] = [.cancelTimer(i.id), .confirmed(id: i.id)]
            if !indicationQueue.isEmpty {
                let next = indicationQueue.removeFirst()
                indication = next
                events += [.send(next.pdu.bytes), .startTimer(next.id)]
            }
            return events
        case .unknown:
            // An unknown opcode without the command flag is a request we do not support.
            return [.send(ATTPDU.errorResponse(request: pdu.opcode, handle: 0, error: .requestNotSupported).bytes)]
        }
    }

    /// The transaction timer `id` fired: if it still runs, the bearer becomes unusable.
    public mutating func timedOut(id: UInt64) -> [Event] {
        let op: ATTOpcode
        if request?.id == id, let r = request { op = r.pdu.opcode } else if indication?.id == id { op = .handleValueIndication } else { return [] }
        return close(reason: "\(op) got no answer within 30 s", timedOut: (id, op))
    }

    /// The link went away: everything pending fails.
    public mutating func close(reason: String) -> [Event] { close(reason: reason, timedOut: nil) }

    private mutating func close(reason: String, timedOut: (UInt64, ATTOpcode)?) -> [Event] {
        guard unusableReason == nil else { return [] }
        unusableReason = reason
        var events: [Event] = []
        let pending = [request, indication].compactMap { $0 } + requestQueue + indicationQueue
        for o in pending {
            if let (tid, op) = timedOut, tid == o.id {
                events.append(.failed(id: o.id, .transactionTimeout(op)))
            } else {
                events.append(.failed(id: o.id, .bearerUnusable(reason)))
            }
        }
        for t in [request, indication].compactMap({ $0 }) where t.id != timedOut?.0 { events.insert(.cancelTimer(t.id), at: 0) }
        request = nil
        indication = nil
        requestQueue.removeAll()
        indicationQueue.removeAll()
        return events
    }

    private mutating func finishRequest(_ outcome: Event) -> [Event] {
        guard let r = request else { return [outcome] }
        request = nil
        var events: [Event] = [.cancelTimer(r.id), outcome]
        if !requestQueue.isEmpty {
            let next = requestQueue.removeFirst()
            request = next
            events += [.send(next.pdu.bytes), .startTimer(next.id)]
        }
        return events
    }

    private mutating func setMTU(client: UInt16, server: UInt16) -> [Event] {
        let new = Swift.max(Self.defaultMTU, Int(Swift.min(client, server)))
        guard new != mtu else { return [] }
        mtu = new
        return [.mtuChanged(new)]
    }

    /// Whether `response` is the answer §3.4 defines for `request` (the next opcode).
    static func answers(_ response: ATTOpcode, _ request: ATTOpcode) -> Bool {
        response == .errorResponse || response.rawValue == request.rawValue + 1
    }

    private mutating func takeID() -> UInt64 {
        defer { nextID += 1 }
        return nextID
    }
}
