// The LE signaling channel, CID 0x0005 (Core Specification v5.4, Vol 3, Part A, §4),
// sans I/O. One command per C-frame on LE. What this host does:
//   - as central, answers Connection Parameter Update Request (§4.20): validates the
//     parameters against §4.20's ranges, responds accepted or rejected, and on accept
//     asks the caller to run LE Connection Update;
//   - as peripheral, sends that request and matches the response by identifier, and
//     rejects a request sent to it (only a central may answer one);
//   - hands the credit-based channel commands of both modes (§4.22–§4.28) and
//     Disconnection Request/Response (§4.6, §4.7) to the link's `CreditBasedChannels`,
//     which answers a request for an SPSM nobody listens on with "SPSM not supported"
//     and a Disconnection Request for a CID it does not have with Command Reject
//     "Invalid CID in request" carrying both CIDs (§4.1);
//   - answers every other command it does not support with Command Reject "Command
//     not understood" (§4.1), ignores unexpected responses and identifier 0x00.

import HCI

public struct SignalingCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public static let commandReject = SignalingCode(rawValue: 0x01)
    public static let disconnectionRequest = SignalingCode(rawValue: 0x06)
    public static let disconnectionResponse = SignalingCode(rawValue: 0x07)
    public static let connectionParameterUpdateRequest = SignalingCode(rawValue: 0x12)
    public static let connectionParameterUpdateResponse = SignalingCode(rawValue: 0x13)
    public static let leCreditBasedConnectionRequest = SignalingCode(rawValue: 0x14)
    public static let leCreditBasedConnectionResponse = SignalingCode(rawValue: 0x15)
    public static let flowControlCreditIndication = SignalingCode(rawValue: 0x16)
    public static let creditBasedConnectionRequest = SignalingCode(rawValue: 0x17)
    public static let creditBasedConnectionResponse = SignalingCode(rawValue: 0x18)
    public static let creditBasedReconfigureRequest = SignalingCode(rawValue: 0x19)
    public static let creditBasedReconfigureResponse = SignalingCode(rawValue: 0x1A)

    /// Responses and indications are never answered with Command Reject.
    var isResponse: Bool { [0x01, 0x07, 0x13, 0x15, 0x16, 0x18, 0x1A].contains(rawValue) }

    public var description: String {
        switch rawValue {
        case 0x01: return "Command Reject"
        case 0x02: return "Connection Request"
        case 0x03: return "Connection Response"
        case 0x04: return "Configuration Request"
        case 0x05: return "Configuration Response"
        case 0x06: return "Disconnection Request"
        case 0x07: return "Disconnection Response"
        case 0x12: return "Connection Parameter Update Request"
        case 0x13: return "Connection Parameter Update Response"
        case 0x14: return "LE Credit Based Connection Request"
        case 0x15: return "LE Credit Based Connection Response"
        case 0x16: return "Flow Control Credit Indication"
        case 0x17: return "Credit Based Connection Request"
        case 0x18: return "Credit Based Connection Response"
        case 0x19: return "Credit Based Reconfigure Request"
        case 0x1A: return "Credit Based Reconfigure Response"
        case 0x0A: return "Information Request"
        case 0x0B: return "Information Response"
        default: return "unknown 0x" + String(rawValue, radix: 16)
        }
    }
}

/// One signaling command: code, identifier, data (§4).
public struct SignalingCommand: Hashable, Sendable {
    public var code: SignalingCode
    public var identifier: UInt8
    public var data: [UInt8]
    public init(code: SignalingCode, identifier: UInt8, data: [UInt8]) {
        self.code = code
        self.identifier = identifier
        self.data = data
    }

    public var bytes: [UInt8] {
        var w = ByteWriter(capacity: data.count + 4)
        w.write(code.rawValue); w.write(identifier); w.write(UInt16(truncatingIfNeeded: data.count)); w.write(contentsOf: data)
        return w.bytes
    }

    public init(bytes: [UInt8]) throws {
        var r = ByteReader(bytes, context: "LE signaling command")
        code = SignalingCode(rawValue: try r.readUInt8("Code"))
        identifier = try r.readUInt8("Identifier")
        let len = Int(try r.readUInt16("Length"))
        guard len == r.remaining else { throw DecodeError.lengthMismatch(what: "LE signaling \(code)", declared: len, actual: r.remaining) }
        data = r.readRemaining()
    }
}

extension SignalingCommand {
    /// The bytes of Command Reject (§4.1) for command `identifier`, with the reason's data.
    static func reject(_ identifier: UInt8, _ reason: CommandRejectReason, data: [UInt8] = []) -> [UInt8] {
        SignalingCommand(code: .commandReject, identifier: identifier, data: [UInt8(reason.rawValue & 0xFF), UInt8(reason.rawValue >> 8)] + data).bytes
    }
}

/// Command Reject reasons (§4.1).
public enum CommandRejectReason: UInt16, Sendable {
    case commandNotUnderstood = 0x0000
    case signalingMTUExceeded = 0x0001
    case invalidCIDInRequest = 0x0002
}

/// Connection parameters of Connection Parameter Update Request, in the request's units:
/// interval 1.25 ms, timeout 10 ms.
public struct ConnectionParameterUpdate: Hashable, Sendable {
    public var intervalMin: UInt16
    public var intervalMax: UInt16
    public var latency: UInt16
    public var timeout: UInt16
    public init(intervalMin: UInt16, intervalMax: UInt16, latency: UInt16, timeout: UInt16) {
        self.intervalMin = intervalMin
        self.intervalMax = intervalMax
        self.latency = latency
        self.timeout = timeout
    }

    /// §4.20 / Vol 6, Part B, §4.5.1: interval 6...3200, min ≤ max, latency ≤ 499,
    /// timeout 10...3200 and longer than (1 + latency) × interval max × 2
    /// (`LEConnectionParameters.fault`, the same rules as LE Create Connection's).
    public var isValid: Bool {
        LEConnectionParameters(connectionIntervalMin: intervalMin, connectionIntervalMax: intervalMax, maxLatency: latency,
                               supervisionTimeout: timeout).fault == nil
    }

    var bytes: [UInt8] {
        var w = ByteWriter(capacity: 8)
        w.write(intervalMin); w.write(intervalMax); w.write(latency); w.write(timeout)
        return w.bytes
    }
}

public struct LESignalingChannel: Sendable {
    public enum Event: Hashable, Sendable {
        /// Send these bytes on CID 0x0005.
        case send([UInt8])
        /// Central: the peripheral asked for these parameters and we accepted; run LE Connection Update.
        case updateConnection(ConnectionParameterUpdate)
        /// Peripheral: the central answered our request `identifier`.
        case parameterUpdateAnswered(identifier: UInt8, accepted: Bool)
        /// The peer rejected our command `identifier`.
        case rejected(identifier: UInt8, reason: UInt16)
        /// A malformed or unexpected PDU (already answered where the spec says to).
        case ignored(String)
        /// Something for the link's credit-based channels.
        case channel(CreditBasedChannels.Event)
    }

    public let role: ConnectionRole
    private var outstanding: Set<UInt8> = []
    /// The link's connection-oriented channels (and its identifier counter).
    public var channels = CreditBasedChannels()

    public init(role: ConnectionRole) { self.role = role }

    /// Peripheral: the bytes of a Connection Parameter Update Request, with its identifier.
    public mutating func requestParameterUpdate(_ p: ConnectionParameterUpdate) -> (identifier: UInt8, bytes: [UInt8]) {
        let id = takeIdentifier()
        outstanding.insert(id)
        return (id, SignalingCommand(code: .connectionParameterUpdateRequest, identifier: id, data: p.bytes).bytes)
    }

    /// Peripheral: our request timed out (the caller's RTX timer); forget it.
    public mutating func abandon(identifier: UInt8) { outstanding.remove(identifier) }

    public mutating func receive(_ payload: [UInt8]) -> [Event] {
        let cmd: SignalingCommand
        do { cmd = try SignalingCommand(bytes: payload) } catch {
            // Cannot tell which command it was: reject with the identifier if we have one.
            if payload.count >= 2, payload[1] != 0 { return [.send(reject(payload[1], .commandNotUnderstood)), .ignored("\(error)")] }
            return [.ignored("\(error)")]
        }
        guard cmd.identifier != 0 else { return [.ignored("identifier 0x00 is illegal (§4)")] }
        if cmd.code != .commandReject || channels.isOutstanding(cmd.identifier), let events = channels.receive(cmd) {
            return events.map { .channel($0) }
        }
        switch cmd.code {
        case .connectionParameterUpdateRequest:
            guard role == .central else { return [.send(reject(cmd.identifier, .commandNotUnderstood))] }
            var r = ByteReader(cmd.data, context: "Connection Parameter Update Request")
            guard let p = try? ConnectionParameterUpdate(
                intervalMin: r.readUInt16(), intervalMax: r.readUInt16(), latency: r.readUInt16(), timeout: r.readUInt16()),
                r.isAtEnd else {
                return [.send(reject(cmd.identifier, .commandNotUnderstood)), .ignored("malformed Connection Parameter Update Request")]
            }
            let ok = p.isValid
            let rsp = SignalingCommand(code: .connectionParameterUpdateResponse, identifier: cmd.identifier, data: [ok ? 0 : 1, 0]).bytes
            return ok ? [.send(rsp), .updateConnection(p)] : [.send(rsp)]
        case .connectionParameterUpdateResponse:
            guard role == .peripheral, outstanding.remove(cmd.identifier) != nil, cmd.data.count == 2 else {
                return [.ignored("unexpected Connection Parameter Update Response")]
            }
            return [.parameterUpdateAnswered(identifier: cmd.identifier, accepted: cmd.data[0] == 0 && cmd.data[1] == 0)]
        case .commandReject:
            guard outstanding.remove(cmd.identifier) != nil, cmd.data.count >= 2 else { return [.ignored("unexpected Command Reject")] }
            return [.rejected(identifier: cmd.identifier, reason: UInt16(cmd.data[0]) | UInt16(cmd.data[1]) << 8)]
        default:
            if cmd.code.isResponse { return [.ignored("unexpected \(cmd.code)")] }
            return [.send(reject(cmd.identifier, .commandNotUnderstood))]
        }
    }

    private func reject(_ identifier: UInt8, _ reason: CommandRejectReason, data: [UInt8] = []) -> [UInt8] {
        SignalingCommand.reject(identifier, reason, data: data)
    }

    private mutating func takeIdentifier() -> UInt8 { channels.takeIdentifier() }
}

extension SignalingCommand {
    /// The command's parameters by name, as §4 lays them out (for trace decoders);
    /// empty when the code is unknown or the data does not fit its layout.
    public var fields: [(name: String, value: Int)] {
        let names: [String]
        switch code {
        case .commandReject: names = ["reason"]
        // BR/EDR signaling (CID 0x0001, §4.2–§4.5, §4.10, §4.11): the fixed leading fields.
        case SignalingCode(rawValue: 0x02): names = ["psm", "scid"]
        case SignalingCode(rawValue: 0x03): names = ["dcid", "scid", "result", "status"]
        case SignalingCode(rawValue: 0x04): names = ["dcid", "flags"]
        case SignalingCode(rawValue: 0x05): names = ["scid", "flags", "result"]
        case SignalingCode(rawValue: 0x0A): names = ["info_type"]
        case SignalingCode(rawValue: 0x0B): names = ["info_type", "result"]
        case .disconnectionRequest, .disconnectionResponse: names = ["dcid", "scid"]
        case .connectionParameterUpdateRequest: names = ["interval_min", "interval_max", "latency", "timeout"]
        case .connectionParameterUpdateResponse: names = ["result"]
        case .leCreditBasedConnectionRequest: names = ["spsm", "scid", "mtu", "mps", "initial_credits"]
        case .leCreditBasedConnectionResponse: names = ["dcid", "mtu", "mps", "initial_credits", "result"]
        case .flowControlCreditIndication: names = ["cid", "credits"]
        case .creditBasedConnectionRequest: names = ["spsm", "mtu", "mps", "initial_credits"]
        case .creditBasedConnectionResponse: names = ["mtu", "mps", "initial_credits", "result"]
        case .creditBasedReconfigureRequest: names = ["mtu", "mps"]
        case .creditBasedReconfigureResponse: names = ["result"]
        default: return []
        }
        var r = ByteReader(data, context: "\(code)")
        var out: [(String, Int)] = []
        for n in names {
            guard let v = try? r.readUInt16() else { return out }
            out.append((n, Int(v)))
        }
        // The enhanced commands end with a list of CIDs (§4.25, §4.26, §4.27), as does a
        // Command Reject for an invalid CID (§4.1); other commands' options are not listed.
        guard [0x01, 0x17, 0x18, 0x19].contains(code.rawValue) else { return out }
        var i = 0
        while let cid = try? r.readUInt16() {
            out.append(("cid\(i)", Int(cid)))
            i += 1
        }
        return out
    }
}
