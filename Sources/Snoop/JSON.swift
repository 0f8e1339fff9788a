// A minimal ordered JSON value and its one-line rendering (for `--json` output).

public indirect enum JSONValue: Sendable, Equatable {
    case int(Int)
    /// A number with a fraction; NaN and infinities render as null (JSON has neither).
    case double(Double)
    case string(String)
    case bool(Bool)
    case array([JSONValue])
    case object([(String, JSONValue)])
    case null

    public static func == (a: JSONValue, b: JSONValue) -> Bool { a.rendered == b.rendered }

    public var rendered: String {
        var s = ""
        render(into: &s)
        return s
    }

    public func render(into s: inout String) {
        switch self {
        case let .int(i): s += String(i)
        case let .double(d): s += d.isFinite ? (d == d.rounded() && abs(d) < 1e15 ? String(Int(d)) : String(d)) : "null"
        case let .bool(b): s += b ? "true" : "false"
        case .null: s += "null"
        case let .string(str): JSONValue.escape(str, into: &s)
        case let .array(a):
            s += "["
            for (i, v) in a.enumerated() {
                if i > 0 { s += "," }
                v.render(into: &s)
            }
            s += "]"
        case let .object(o):
            s += "{"
            for (i, (k, v)) in o.enumerated() {
                if i > 0 { s += "," }
                JSONValue.escape(k, into: &s)
                s += ":"
                v.render(into: &s)
            }
            s += "}"
        }
    }

    static func escape(_ str: String, into s: inout String) {
        s += "\""
        for u in str.unicodeScalars {
            switch u {
            case "\"": s += "\\\""
            case "\\": s += "\\\\"
            case "\n": s += "\\n"
            case "\r": s += "\\r"
            case "\t": s += "\\t"
            default:
                if u.value < 0x20 {
                    let h = String(u.value, radix: 16)
                    s += "\\u" + String(repeating: "0", count: 4 - h.count) + h
                } else {
                    s.unicodeScalars.append(u)
                }
            }
        }
        s += "\""
    }

    public subscript(key: String) -> JSONValue? {
        if case let .object(o) = self { return o.first { $0.0 == key }?.1 }
        return nil
    }
}

extension JSONValue {
    /// Parses one JSON text (a frame `trace show --json` wrote, for instance); numbers
    /// without a fraction or exponent become `.int`.
    public init(parsing bytes: [UInt8]) throws {
        self.init(try JSONDocument.parse(bytes))
    }

    init(_ node: JSONNode) {
        switch node.value {
        case .null: self = .null
        case let .bool(b): self = .bool(b)
        case let .number(t): self = Int(t).map(JSONValue.int) ?? .double(Double(t) ?? .nan)
        case let .string(s): self = .string(s)
        case let .array(a): self = .array(a.map(JSONValue.init))
        case let .object(o): self = .object(o.map { ($0.key, JSONValue($0.value)) })
        }
    }
}
