// Where `trace show` and `btctl monitor` write decoded frames: bytes appended to one
// growing buffer (no String per field, no JSON tree), in two shapes behind one
// interface, `FrameSink`: JSON (docs/trace-json.md) and the text view (a summary line,
// then indented detail lines). The decoder calls both kinds of operation; each sink
// ignores the other kind, and the compiler specializes the decoder per sink.

import HCI

/// Output bytes, appended without intermediate Strings.
public struct OutputBuffer: Sendable {
    public var bytes: [UInt8] = []

    public init(capacity: Int = 1 << 17) { bytes.reserveCapacity(capacity) }

    @inline(__always) mutating func put(_ s: StaticString) {
        s.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }

    @inline(__always) mutating func put(_ b: UInt8) { bytes.append(b) }

    mutating func put(_ s: String) {
        var s = s
        s.withUTF8 { bytes.append(contentsOf: $0) }
    }

    mutating func put(_ s: some Sequence<UInt8>) { bytes.append(contentsOf: s) }

    mutating func spaces(_ n: Int) {
        for _ in 0..<Swift.max(0, n) { bytes.append(0x20) }
    }

    mutating func decimal(_ v: Int) {
        if v < 0 {
            bytes.append(UInt8(ascii: "-"))
            decimal(v.magnitude)
        } else {
            decimal(UInt(v))
        }
    }

    mutating func decimal(_ v: UInt) { decimal(UInt64(v)) }

    mutating func decimal(_ v: UInt64) {
        if v < 10 {
            bytes.append(0x30 &+ UInt8(truncatingIfNeeded: v))
            return
        }
        var digits: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64,
                     UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) =
            (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var n = 0
        var x = v
        withUnsafeMutableBytes(of: &digits) { d in
            while x > 0 {
                d[n] = 0x30 &+ UInt8(truncatingIfNeeded: x % 10)
                x /= 10
                n += 1
            }
            while n > 0 {
                n -= 1
                bytes.append(d[n])
            }
        }
    }

    /// `width` lowercase hex digits (more if the value needs them).
    mutating func hex(_ v: UInt64, width: Int) {
        var digits = 1
        while digits < 16, v >> (4 * UInt64(digits)) != 0 { digits += 1 }
        for _ in digits..<Swift.max(digits, width) { bytes.append(0x30) }
        var i = digits
        while i > 0 {
            i -= 1
            bytes.append(Self.lower[Int((v >> (4 * UInt64(i))) & 0xF)])
        }
    }

    static let lower: [UInt8] = Array("0123456789abcdef".utf8)
    static let upper: [UInt8] = Array("0123456789ABCDEF".utf8)

    /// Bytes as lowercase hex, no separators (`[UInt8].hexString`).
    mutating func hexBytes(_ b: some Collection<UInt8>) {
        bytes.reserveCapacity(bytes.count + 2 * b.count)
        for x in b {
            bytes.append(Self.lower[Int(x >> 4)])
            bytes.append(Self.lower[Int(x & 0xF)])
        }
    }

    /// A Bluetooth address as written: most significant octet first, uppercase, colons.
    mutating func address(_ a: BluetoothAddress) {
        var first = true
        for x in a.bytes.reversed() {
            if !first { bytes.append(UInt8(ascii: ":")) }
            first = false
            bytes.append(Self.upper[Int(x >> 4)])
            bytes.append(Self.upper[Int(x & 0xF)])
        }
    }

    /// Seconds with six decimals from microseconds ("-0.000001" for negative values).
    mutating func seconds(_ micros: Int64) {
        if micros < 0 { bytes.append(UInt8(ascii: "-")) }
        let m = micros.magnitude
        decimal(m / 1_000_000)
        bytes.append(UInt8(ascii: "."))
        let f = m % 1_000_000
        var scale: UInt64 = 100_000
        while scale > 0 {
            bytes.append(0x30 &+ UInt8(truncatingIfNeeded: (f / scale) % 10))
            scale /= 10
        }
    }

    /// A JSON string literal of UTF-8 text (quotes, backslash and control characters escaped).
    mutating func jsonString(utf8 s: some Collection<UInt8>) {
        bytes.append(UInt8(ascii: "\""))
        for b in s {
            switch b {
            case UInt8(ascii: "\""): put("\\\"")
            case UInt8(ascii: "\\"): put("\\\\")
            case 0x0A: put("\\n")
            case 0x0D: put("\\r")
            case 0x09: put("\\t")
            case 0..<0x20:
                put("\\u00")
                bytes.append(Self.lower[Int(b >> 4)])
                bytes.append(Self.lower[Int(b & 0xF)])
            default: bytes.append(b)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    mutating func jsonString(_ s: String) {
        var s = s
        s.withUTF8 { jsonString(utf8: $0) }
    }

    mutating func jsonString(_ s: StaticString) {
        s.withUTF8Buffer { jsonString(utf8: $0) }
    }
}

/// Separators for nested lists and objects: whether the next member is the first at
/// its level, and whether a value follows its key.
struct Nesting {
    private var firstBits: UInt64 = 1
    private(set) var depth = 0
    private var afterKey = false

    mutating func push() {
        depth += 1
        if depth < 64 { firstBits |= 1 << UInt64(depth) }
    }

    mutating func pop() {
        if depth > 0 { depth -= 1 }
        afterKey = false
    }

    /// Starts a key; true when a separator goes before it.
    mutating func key() -> Bool {
        let sep = !isFirst
        markUsed()
        afterKey = true
        return sep
    }

    /// Starts a value; true when a separator goes before it (a list's later element).
    mutating func value() -> Bool {
        if afterKey {
            afterKey = false
            return false
        }
        let sep = !isFirst
        markUsed()
        return sep
    }

    private var isFirst: Bool { depth >= 64 || firstBits & (1 << UInt64(depth)) != 0 }
    private mutating func markUsed() { if depth < 64 { firstBits &= ~(1 << UInt64(depth)) } }
}

/// Where the decoder writes a frame. The value operations (keys, numbers, strings,
/// lists, objects) build the JSON object; the text sink takes them only inside
/// `params`, as detail lines. `summary` and `detail` write the text view; the JSON
/// sink skips them.
protocol FrameSink: FieldVisitor {
    /// Whether key material is shown (otherwise a `longTermKey` parameter reads "<redacted>").
    var showKeys: Bool { get }
    mutating func begin(number: Int, timestampMicros: Int64, relative: Int64, direction: TraceRecord.Direction, index: UInt16?)
    mutating func end()
    mutating func key(_ name: String)
    mutating func string(_ s: StaticString)
    mutating func string(_ s: String)
    mutating func beginParams()
    mutating func endParams()
    mutating func summary(_ body: (inout OutputBuffer) -> Void)
    mutating func detail(_ body: (inout OutputBuffer) -> Void)
}

extension FrameSink {
    mutating func field(_ k: StaticString, int v: Int) { key(k); int(v) }
    mutating func field(_ k: StaticString, _ s: StaticString) { key(k); string(s) }
    mutating func field(_ k: StaticString, string s: String) { key(k); string(s) }
    mutating func field(_ k: StaticString, bool b: Bool) { key(k); bool(b) }
    mutating func field(_ k: StaticString, hex b: some Collection<UInt8>) {
        key(k)
        var h = OutputBuffer(capacity: 2 * b.count)
        h.hexBytes(b)
        string(String(decoding: h.bytes, as: UTF8.self))
    }
}

/// Whether `name` is a parameter that holds a long-term key.
func isKeyParameter(_ name: StaticString) -> Bool {
    name.utf8CodeUnitCount == 11 && name.withUTF8Buffer { $0.elementsEqual("longTermKey".utf8) }
}

/// One JSON object per frame, one per line.
struct JSONFrameSink: FrameSink {
    var out: OutputBuffer
    let showKeys: Bool
    private var nesting = Nesting()
    private var redactNext = false

    init(out: OutputBuffer, showKeys: Bool) { (self.out, self.showKeys) = (out, showKeys) }

    mutating func begin(number: Int, timestampMicros: Int64, relative: Int64, direction: TraceRecord.Direction, index: UInt16?) {
        nesting = Nesting()
        out.put(UInt8(ascii: "{"))
        nesting.push()
        field("frame", int: number)
        key("ts_us"); out.decimal(Int(timestampMicros))
        switch direction {
        case .hostToController: field("dir", "tx")
        case .controllerToHost: field("dir", "rx")
        case .unknown: field("dir", "unknown")
        }
        if let index { field("index", int: Int(index)) }
    }

    mutating func end() {
        out.put("}\n")
        nesting = Nesting()
    }

    private mutating func startValue() { if nesting.value() { out.put(UInt8(ascii: ",")) } }

    mutating func key(_ name: StaticString) {
        if nesting.key() { out.put(UInt8(ascii: ",")) }
        out.put(UInt8(ascii: "\""))
        out.put(name)
        out.put("\":")
        redactNext = !showKeys && isKeyParameter(name)
    }

    mutating func key(_ name: String) {
        if nesting.key() { out.put(UInt8(ascii: ",")) }
        out.jsonString(name)
        out.put(UInt8(ascii: ":"))
    }

    mutating func int(_ v: Int) { startValue(); out.decimal(v) }
    mutating func uint64(_ v: UInt64) {
        startValue()
        if v <= UInt64(Int.max) { out.decimal(v) } else { out.put(UInt8(ascii: "\"")); out.decimal(v); out.put(UInt8(ascii: "\"")) }
    }
    mutating func bool(_ v: Bool) { startValue(); out.put(v ? "true" : "false") }
    mutating func null() { startValue(); out.put("null") }
    mutating func text(_ v: String) { startValue(); out.jsonString(v) }
    mutating func string(_ s: StaticString) { startValue(); out.jsonString(s) }
    mutating func string(_ s: String) { startValue(); out.jsonString(s) }
    mutating func address(_ a: BluetoothAddress) {
        startValue()
        out.put(UInt8(ascii: "\""))
        out.address(a)
        out.put(UInt8(ascii: "\""))
    }
    mutating func hex(_ b: [UInt8]) {
        startValue()
        if redactNext {
            redactNext = false
            out.put("\"<redacted>\"")
            return
        }
        out.put(UInt8(ascii: "\""))
        out.hexBytes(b)
        out.put(UInt8(ascii: "\""))
    }
    mutating func beginObject() { startValue(); out.put(UInt8(ascii: "{")); nesting.push() }
    mutating func endObject() { out.put(UInt8(ascii: "}")); nesting.pop() }
    mutating func beginArray() { startValue(); out.put(UInt8(ascii: "[")); nesting.push() }
    mutating func endArray() { out.put(UInt8(ascii: "]")); nesting.pop() }
    mutating func beginParams() { key("params"); beginObject() }
    mutating func endParams() { endObject() }
    mutating func summary(_ body: (inout OutputBuffer) -> Void) {}
    mutating func detail(_ body: (inout OutputBuffer) -> Void) {}
}

/// The text view: `#N  seconds  dir  summary`, then one indented line per detail
/// (parameters as `name: value`, nested values as `{k=v, ...}` and `[a, b]`).
struct TextFrameSink: FrameSink {
    var out: OutputBuffer
    let showKeys: Bool
    /// Summary lines only (`btctl monitor --brief`).
    let brief: Bool
    private var details = OutputBuffer(capacity: 4096)
    private var nesting = Nesting()
    private var inParams = false
    private var lineOpen = false
    private var redactNext = false

    static let indent = 26

    init(out: OutputBuffer, showKeys: Bool, brief: Bool = false) { (self.out, self.showKeys, self.brief) = (out, showKeys, brief) }

    mutating func begin(number: Int, timestampMicros: Int64, relative: Int64, direction: TraceRecord.Direction, index: UInt16?) {
        details.bytes.removeAll(keepingCapacity: true)
        let start = out.bytes.count
        out.put(UInt8(ascii: "#"))
        out.decimal(number)
        out.spaces(7 - (out.bytes.count - start))
        out.put(UInt8(ascii: " "))
        out.seconds(relative)
        out.put("  ")
        switch direction {
        case .hostToController: out.put("tx     ")
        case .controllerToHost: out.put("rx     ")
        case .unknown: out.put("unknown")
        }
        out.put(UInt8(ascii: " "))
    }

    mutating func end() {
        out.put(UInt8(ascii: "\n"))
        if !brief { out.put(details.bytes) }
    }

    mutating func summary(_ body: (inout OutputBuffer) -> Void) { body(&out) }

    mutating func detail(_ body: (inout OutputBuffer) -> Void) {
        guard !brief else { return }
        details.spaces(Self.indent)
        body(&details)
        details.put(UInt8(ascii: "\n"))
    }

    mutating func beginParams() {
        guard !brief else { return }
        inParams = true
        nesting = Nesting()
    }

    mutating func endParams() {
        if lineOpen { details.put(UInt8(ascii: "\n")) }
        lineOpen = false
        inParams = false
    }

    private mutating func startKey() -> Bool {
        guard inParams else { return false }
        if nesting.depth == 0 {
            _ = nesting.key()
            if lineOpen { details.put(UInt8(ascii: "\n")) }
            details.spaces(Self.indent)
            lineOpen = true
        } else if nesting.key() {
            details.put(", ")
        }
        return true
    }

    mutating func key(_ name: StaticString) {
        guard startKey() else { return }
        details.put(name)
        details.put(nesting.depth == 0 ? ": " : "=")
        redactNext = !showKeys && isKeyParameter(name)
    }

    mutating func key(_ name: String) {
        guard startKey() else { return }
        details.put(name)
        details.put(nesting.depth == 0 ? ": " : "=")
    }

    private mutating func startValue() -> Bool {
        guard inParams else { return false }
        if nesting.value() { details.put(", ") }
        return true
    }

    mutating func int(_ v: Int) { if startValue() { details.decimal(v) } }
    mutating func uint64(_ v: UInt64) { if startValue() { details.decimal(v) } }
    mutating func bool(_ v: Bool) { if startValue() { details.put(v ? "true" : "false") } }
    mutating func null() { if startValue() { details.put("null") } }
    mutating func text(_ v: String) { if startValue() { details.put(v) } }
    mutating func string(_ s: StaticString) { if startValue() { details.put(s) } }
    mutating func string(_ s: String) { if startValue() { details.put(s) } }
    mutating func address(_ a: BluetoothAddress) { if startValue() { details.address(a) } }
    mutating func hex(_ b: [UInt8]) {
        guard startValue() else { return }
        if redactNext {
            redactNext = false
            details.put("<redacted>")
        } else {
            details.hexBytes(b)
        }
    }
    mutating func beginObject() { if startValue() { details.put(UInt8(ascii: "{")); nesting.push() } }
    mutating func endObject() { if inParams { details.put(UInt8(ascii: "}")); nesting.pop() } }
    mutating func beginArray() { if startValue() { details.put(UInt8(ascii: "[")); nesting.push() } }
    mutating func endArray() { if inParams { details.put(UInt8(ascii: "]")); nesting.pop() } }
}
