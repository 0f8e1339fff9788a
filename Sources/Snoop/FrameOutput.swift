// Where `trace show` and `btctl monitor` write decoded frames: bytes appended to one
// growing buffer (no String per field, no JSON tree), in two shapes behind one
// interface, `FrameSink`: JSON (docs/trace-json.md) and the text view (a summary line,
// then indented detail lines). The decoder calls both kinds of operation; each sink
// ignores the other kind, and the compiler specializes the decoder per sink.

import HCI

/// Where decoded frames accumulate: memory this object owns, written through
/// `OutputBytes` while a frame is decoded; a caller hands the bytes to write(2) and
/// empties it (`btctl trace show` does so every 64 KiB).
public final class OutputBuffer {
    var main: OutputBytes
    /// The text view's detail lines of the frame being written.
    var side: OutputBytes

    public init(capacity: Int = 1 << 17) {
        main = OutputBytes(capacity: capacity)
        side = OutputBytes(capacity: 4096)
    }

    deinit {
        main.free()
        side.free()
    }

    public var count: Int { main.count }
    public var isEmpty: Bool { main.count == 0 }

    /// The bytes written so far.
    public var bytes: [UInt8] { withBytes { Array($0) } }

    public func withBytes<R>(_ body: (UnsafeBufferPointer<UInt8>) throws -> R) rethrows -> R {
        try body(UnsafeBufferPointer(start: main.base, count: main.count))
    }

    public func removeAll() { main.count = 0 }
}

/// A growable byte region with its own pointer arithmetic, bounds-checked by `reserve`
/// before every write. Owned by an `OutputBuffer`; a sink holds it only while one frame
/// is written and gives it back (it may have moved when it grew).
struct OutputBytes {
    private(set) var base: UnsafeMutablePointer<UInt8>
    var count = 0
    private(set) var capacity: Int

    init(capacity: Int) {
        self.capacity = Swift.max(capacity, 64)
        base = .allocate(capacity: self.capacity)
    }

    func free() { base.deallocate() }

    /// Room for `n` more bytes.
    @inline(__always) mutating func reserve(_ n: Int) {
        if capacity - count < n { grow(n) }
    }

    private mutating func grow(_ n: Int) {
        var c = capacity
        while c - count < n { c *= 2 }
        let b = UnsafeMutablePointer<UInt8>.allocate(capacity: c)
        b.update(from: base, count: count)
        base.deallocate()
        (base, capacity) = (b, c)
    }

    @inline(__always) mutating func put(_ b: UInt8) {
        reserve(1)
        base[count] = b
        count += 1
    }

    mutating func put(_ p: UnsafeBufferPointer<UInt8>) {
        guard let src = p.baseAddress, p.count > 0 else { return }
        reserve(p.count)
        if p.count <= 32 {
            // Keys and punctuation: word copies beat a call to memmove.
            Self.copyShort(from: src, to: base + count, count: p.count)
        } else {
            (base + count).update(from: src, count: p.count)
        }
        count += p.count
    }

    @inline(__always) mutating func put(_ s: StaticString) {
        s.withUTF8Buffer { put($0) }
    }

    mutating func put(_ s: String) {
        var s = s
        s.withUTF8 { put($0) }
    }

    mutating func put(_ s: some Collection<UInt8>) {
        reserve(s.count)
        for b in s {
            base[count] = b
            count += 1
        }
    }

    /// UTF-8 text from a peer as it reads: ASCII as it is, anything else decoded, so
    /// invalid sequences show as U+FFFD.
    mutating func text(utf8 b: ArraySlice<UInt8>) {
        if b.allSatisfy({ $0 < 0x80 }) {
            b.withUnsafeBufferPointer { put($0) }
        } else {
            put(String(decoding: b, as: UTF8.self))
        }
    }

    mutating func put(_ other: OutputBytes) {
        put(UnsafeBufferPointer(start: other.base, count: other.count))
    }

    mutating func spaces(_ n: Int) {
        guard n > 0 else { return }
        reserve(n)
        (base + count).update(repeating: 0x20, count: n)
        count += n
    }

    mutating func decimal(_ v: Int) {
        if v < 0 {
            put(UInt8(ascii: "-"))
            decimal(UInt64(v.magnitude))
        } else {
            decimal(UInt64(v))
        }
    }

    mutating func decimal(_ v: UInt64) {
        reserve(20)
        if v < 10 {
            base[count] = 0x30 &+ UInt8(truncatingIfNeeded: v)
            count += 1
            return
        }
        // Two digits at a time backwards into a scratch word triple, then copied
        // forwards. The pairs come from a string literal: constant data, no lazy
        // initialization to check on every call as a static array would need.
        var x = v
        var at = 24
        var scratch: (UInt64, UInt64, UInt64) = (0, 0, 0)
        Self.digitPairs.withUTF8Buffer { pairs in
            withUnsafeMutableBytes(of: &scratch) { d in
                while x >= 100 {
                    let r = Int(truncatingIfNeeded: x % 100)
                    x /= 100
                    at -= 2
                    d[at] = pairs[2 * r]
                    d[at + 1] = pairs[2 * r + 1]
                }
                if x >= 10 {
                    let r = Int(truncatingIfNeeded: x)
                    at -= 2
                    d[at] = pairs[2 * r]
                    d[at + 1] = pairs[2 * r + 1]
                } else {
                    at -= 1
                    d[at] = 0x30 &+ UInt8(truncatingIfNeeded: x)
                }
                for k in 0..<(24 - at) { base[count + k] = d[at + k] }
            }
        }
        count += 24 - at
    }

    private static let digitPairs: StaticString = """
        00010203040506070809101112131415161718192021222324252627282930313233343536373839\
        40414243444546474849505152535455565758596061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899
        """

    /// `width` lowercase hex digits (more if the value needs them).
    mutating func hex(_ v: UInt64, width: Int) {
        var digits = 1
        while digits < 16, v >> (4 * UInt64(digits)) != 0 { digits += 1 }
        let total = Swift.max(digits, Swift.min(width, 64))
        reserve(total)
        for k in 0..<total {
            let shift = 4 * (total - 1 - k)
            base[count + k] = shift < 64 ? Self.digit(UInt8(truncatingIfNeeded: (v >> UInt64(shift)) & 0xF)) : 0x30
        }
        count += total
    }

    @inline(__always) static func digit(_ n: UInt8) -> UInt8 { n < 10 ? 0x30 &+ n : 0x57 &+ n }
    @inline(__always) static func upperDigit(_ n: UInt8) -> UInt8 { n < 10 ? 0x30 &+ n : 0x37 &+ n }

    /// Bytes as lowercase hex, no separators (`[UInt8].hexString`).
    mutating func hexBytes(_ b: some Collection<UInt8>) {
        reserve(2 * b.count)
        for x in b {
            base[count] = Self.digit(x >> 4)
            base[count + 1] = Self.digit(x & 0xF)
            count += 2
        }
    }

    /// A Bluetooth address as written: most significant octet first, uppercase, colons.
    mutating func address(_ a: BluetoothAddress) {
        reserve(17)
        for i in stride(from: 5, through: 0, by: -1) {
            let x = a.octet(i)
            base[count] = Self.upperDigit(x >> 4)
            base[count + 1] = Self.upperDigit(x & 0xF)
            if i > 0 { base[count + 2] = UInt8(ascii: ":") }
            count += i > 0 ? 3 : 2
        }
    }

    /// Seconds with six decimals from microseconds ("-0.000001" for negative values).
    mutating func seconds(_ micros: Int64) {
        if micros < 0 { put(UInt8(ascii: "-")) }
        let m = micros.magnitude
        decimal(m / 1_000_000)
        reserve(7)
        base[count] = UInt8(ascii: ".")
        var f = m % 1_000_000
        for k in stride(from: 6, to: 0, by: -1) {
            base[count + k] = 0x30 &+ UInt8(truncatingIfNeeded: f % 10)
            f /= 10
        }
        count += 7
    }

    /// A JSON string literal of UTF-8 text (quotes, backslash and control characters escaped).
    mutating func jsonString(utf8 s: UnsafeBufferPointer<UInt8>) {
        put(UInt8(ascii: "\""))
        jsonEscaped(utf8: s)
        put(UInt8(ascii: "\""))
    }

    /// `"text"` (with its quotes) as a JSON string: `"\"text\""`.
    mutating func jsonQuotedText(utf8 s: UnsafeBufferPointer<UInt8>) {
        put("\"\\\"")
        jsonEscaped(utf8: s)
        put("\\\"\"")
    }

    /// The inside of a JSON string: bytes copied as they are until one needs an escape
    /// (looked for eight at a time).
    mutating func jsonEscaped(utf8 s: UnsafeBufferPointer<UInt8>) {
        guard let src = s.baseAddress else { return }
        let n = s.count
        reserve(n)
        var k = 0
        let to = UnsafeMutableRawPointer(base + count)
        while k &+ 8 <= n {
            let w = UnsafeRawPointer(src + k).loadUnaligned(as: UInt64.self)
            if Self.needsEscape(w) { break }
            to.storeBytes(of: w, toByteOffset: k, as: UInt64.self)
            k &+= 8
        }
        while k < n {
            let b = src[k]
            if b < 0x20 || b == UInt8(ascii: "\"") || b == UInt8(ascii: "\\") { break }
            to.storeBytes(of: b, toByteOffset: k, as: UInt8.self)
            k &+= 1
        }
        count += k
        while k < n {
            let b = src[k]
            switch b {
            case UInt8(ascii: "\""): put("\\\"")
            case UInt8(ascii: "\\"): put("\\\\")
            case 0x0A: put("\\n")
            case 0x0D: put("\\r")
            case 0x09: put("\\t")
            case 0..<0x20:
                put("\\u00")
                put(Self.digit(b >> 4))
                put(Self.digit(b & 0xF))
            default: put(b)
            }
            k += 1
        }
    }

    /// Copies `n` bytes (a key, a name: short) a word at a time, never reading or
    /// writing past either end: cheaper than a call to memmove at these sizes.
    @inline(__always) static func copyShort(from src: UnsafePointer<UInt8>, to dst: UnsafeMutablePointer<UInt8>, count n: Int) {
        let from = UnsafeRawPointer(src), to = UnsafeMutableRawPointer(dst)
        // Whole words, then the tail as one more word (or half, quarter word) ending at
        // byte n, overlapping what was copied: no byte loop, nothing outside [0, n).
        @inline(__always) func copy<T: FixedWidthInteger>(_: T.Type, at k: Int) {
            to.storeBytes(of: from.loadUnaligned(fromByteOffset: k, as: T.self), toByteOffset: k, as: T.self)
        }
        if n >= 8 {
            var k = 0
            while k &+ 8 < n {
                copy(UInt64.self, at: k)
                k &+= 8
            }
            copy(UInt64.self, at: n &- 8)
        } else if n >= 4 {
            copy(UInt32.self, at: 0)
            copy(UInt32.self, at: n &- 4)
        } else if n >= 2 {
            copy(UInt16.self, at: 0)
            copy(UInt16.self, at: n &- 2)
        } else if n == 1 {
            copy(UInt8.self, at: 0)
        }
    }

    /// Whether any of the eight bytes of `w` is below 0x20, a quote or a backslash
    /// (the exact "has a zero byte" and "has a byte less than n" word tests).
    @inline(__always) static func needsEscape(_ w: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
        let below = (w &- ones &* 0x20) & ~w & highs
        let q = w ^ (ones &* 0x22), bs = w ^ (ones &* 0x5C)
        let quote = (q &- ones) & ~q & highs, backslash = (bs &- ones) & ~bs & highs
        return (below | quote | backslash) != 0
    }

    /// `,"name":` (the comma when `separator`) for a key known to need no escapes.
    @inline(__always) mutating func jsonKey(_ name: StaticString, separator: Bool) {
        guard name.hasPointerRepresentation else {
            // A one-scalar literal ("x") is stored as the scalar, not as UTF-8 bytes.
            if separator { put(UInt8(ascii: ",")) }
            put(UInt8(ascii: "\""))
            put(name)
            put("\":")
            return
        }
        let n = name.utf8CodeUnitCount
        reserve(n + 4)
        var i = count
        if separator { base[i] = UInt8(ascii: ","); i += 1 }
        base[i] = UInt8(ascii: "\"")
        Self.copyShort(from: name.utf8Start, to: base + i + 1, count: n)
        i += n + 1
        base[i] = UInt8(ascii: "\"")
        base[i + 1] = UInt8(ascii: ":")
        count = i + 2
    }

    mutating func jsonString(_ s: String) {
        var s = s
        s.withUTF8 { jsonString(utf8: $0) }
    }

    mutating func jsonString(_ s: StaticString) {
        s.withUTF8Buffer { jsonString(utf8: $0) }
    }
}

/// Separators for nested lists and objects: whether the current level already has a
/// member (so the next one needs a separator), and whether a value follows its key.
/// A closed list or object is a member of its parent, so the parent always has one
/// when its child ends: no stack is needed.
struct Nesting {
    private(set) var depth = 0
    private var hasMember = false
    private var afterKey = false

    @inline(__always) mutating func push() {
        depth += 1
        hasMember = false
        afterKey = false
    }

    @inline(__always) mutating func pop() {
        if depth > 0 { depth -= 1 }
        hasMember = true
        afterKey = false
    }

    /// Starts a key; true when a separator goes before it.
    @inline(__always) mutating func key() -> Bool {
        let sep = hasMember
        hasMember = true
        afterKey = true
        return sep
    }

    /// Starts a value; true when a separator goes before it (a list's later element).
    @inline(__always) mutating func value() -> Bool {
        if afterKey {
            afterKey = false
            return false
        }
        let sep = hasMember
        hasMember = true
        return sep
    }
}

/// Where the decoder writes a frame. The value operations (keys, numbers, strings,
/// lists, objects) build the JSON object; the text sink takes them only inside
/// `params`, as detail lines. `summary` and `detail` write the text view; the JSON
/// sink skips them.
protocol FrameSink: FieldVisitor {
    /// Whether key material is shown (otherwise a `longTermKey` parameter reads "<redacted>").
    var showKeys: Bool { get }
    /// Whether fields given now are written (JSON: always; text: inside the parameters
    /// only), so a decoder can skip work whose only product is fields.
    var writesFields: Bool { get }
    /// Whether `detail` lines are written (the text view, not brief), so a decoder can
    /// skip work whose only product is detail lines.
    var writesDetails: Bool { get }
    mutating func begin(number: Int, timestampMicros: Int64, relative: Int64, direction: TraceRecord.Direction, index: UInt16?)
    mutating func end()
    mutating func key(_ name: String)
    mutating func string(_ s: StaticString)
    mutating func string(_ s: String)
    mutating func beginParams()
    /// Parameters of an HCI command or event (`opcode`: the command's, or the one a
    /// Command Complete answers): the text view adds what each number means.
    mutating func beginHCIParams(opcode: UInt16?)
    mutating func endParams()
    /// Bytes as a hex string value (never redacted).
    mutating func hex(slice: ArraySlice<UInt8>)
    /// UTF-8 text shown in double quotes (a local name): the value is the quoted text.
    mutating func quotedText(_ utf8: ArraySlice<UInt8>)
    mutating func summary(_ body: (inout OutputBytes) -> Void)
    mutating func detail(_ body: (inout OutputBytes) -> Void)
}

extension FrameSink {
    mutating func beginHCIParams(opcode: UInt16?) { beginParams() }
    mutating func field(_ k: StaticString, int v: Int) { key(k); int(v) }
    mutating func field(_ k: StaticString, _ s: StaticString) { key(k); string(s) }
    mutating func field(_ k: StaticString, string s: String) { key(k); string(s) }
    mutating func field(_ k: StaticString, bool b: Bool) { key(k); bool(b) }
    mutating func field(_ k: StaticString, hex b: [UInt8]) { key(k); hex(slice: b[...]) }
    mutating func field(_ k: StaticString, hex b: ArraySlice<UInt8>) { key(k); hex(slice: b) }
}

/// Whether `name` is a parameter that holds a long-term key.
@inline(__always) func isKeyParameter(_ name: StaticString) -> Bool {
    name.utf8CodeUnitCount == 11 && name.withUTF8Buffer { $0.elementsEqual("longTermKey".utf8) }
}

/// One JSON object per frame, one per line.
struct JSONFrameSink: FrameSink {
    var out: OutputBytes
    let showKeys: Bool
    var writesFields: Bool { true }
    var writesDetails: Bool { false }
    private var nesting = Nesting()
    private var redactNext = false
    private var paramsPending = false
    private var paramsOpen = false

    init(out: OutputBytes, showKeys: Bool) { (self.out, self.showKeys) = (out, showKeys) }

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
        openParams()
        out.jsonKey(name, separator: nesting.key())
        redactNext = !showKeys && isKeyParameter(name)
    }

    mutating func key(_ name: String) {
        openParams()
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
    mutating func quotedText(_ utf8: ArraySlice<UInt8>) {
        startValue()
        if utf8.allSatisfy({ $0 < 0x80 }) {
            utf8.withUnsafeBufferPointer { out.jsonQuotedText(utf8: $0) }
        } else {
            // Not plain ASCII: decoding repairs invalid UTF-8 (U+FFFD), so the JSON stays valid.
            var text = String(decoding: utf8, as: UTF8.self)
            text.withUTF8 { out.jsonQuotedText(utf8: $0) }
        }
    }
    mutating func hex(slice b: ArraySlice<UInt8>) {
        startValue()
        out.put(UInt8(ascii: "\""))
        out.hexBytes(b)
        out.put(UInt8(ascii: "\""))
    }
    mutating func beginObject() { startValue(); out.put(UInt8(ascii: "{")); nesting.push() }
    mutating func endObject() { out.put(UInt8(ascii: "}")); nesting.pop() }
    mutating func beginArray() { startValue(); out.put(UInt8(ascii: "[")); nesting.push() }
    mutating func endArray() { out.put(UInt8(ascii: "]")); nesting.pop() }
    /// `params` is written when its first field comes: a value without fields has none.
    mutating func beginParams() { paramsPending = true }

    private mutating func openParams() {
        guard paramsPending else { return }
        paramsPending = false
        key("params")
        beginObject()
        paramsOpen = true
    }

    mutating func endParams() {
        paramsPending = false
        if paramsOpen { endObject() }
        paramsOpen = false
    }
    mutating func summary(_ body: (inout OutputBytes) -> Void) {}
    mutating func detail(_ body: (inout OutputBytes) -> Void) {}
}

/// The text view: `#N  seconds  dir  summary`, then one indented line per detail
/// (parameters as `name: value`, nested values as `{k=v, ...}` and `[a, b]`).
struct TextFrameSink: FrameSink {
    var out: OutputBytes
    /// The frame's detail lines, printed after its summary.
    var details: OutputBytes
    let showKeys: Bool
    /// Summary lines only (`btctl monitor --brief`).
    let brief: Bool
    private var nesting = Nesting()
    private var inParams = false
    private var lineOpen = false
    private var redactNext = false
    /// Inside an HCI command's or event's parameters: numbers are shown with their meaning.
    private var hciParams = false
    private var opcode: UInt16?
    /// The meaning of the value the last key names.
    private var meaning: ParameterMeaning?
    var writesFields: Bool { inParams }
    var writesDetails: Bool { !brief }

    static let indent = 26

    init(out: OutputBytes, details: OutputBytes, showKeys: Bool, brief: Bool = false) {
        (self.out, self.details, self.showKeys, self.brief) = (out, details, showKeys, brief)
    }

    mutating func begin(number: Int, timestampMicros: Int64, relative: Int64, direction: TraceRecord.Direction, index: UInt16?) {
        details.count = 0
        let start = out.count
        out.put(UInt8(ascii: "#"))
        out.decimal(number)
        out.spaces(7 - (out.count - start))
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
        if !brief { out.put(details) }
    }

    mutating func summary(_ body: (inout OutputBytes) -> Void) { body(&out) }

    mutating func detail(_ body: (inout OutputBytes) -> Void) {
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

    mutating func beginHCIParams(opcode: UInt16?) {
        beginParams()
        hciParams = !brief
        self.opcode = opcode
    }

    mutating func endParams() {
        if lineOpen { details.put(UInt8(ascii: "\n")) }
        lineOpen = false
        inParams = false
        hciParams = false
        meaning = nil
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
        if hciParams { meaning = ParameterMeaning.of(name, opcode: opcode) }
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

    mutating func int(_ v: Int) {
        guard startValue() else { return }
        if let m = takeMeaning() { m.write(Int64(v), into: &details) } else { details.decimal(v) }
    }
    mutating func uint64(_ v: UInt64) {
        guard startValue() else { return }
        if let m = takeMeaning() { m.write(Int64(bitPattern: v), into: &details) } else { details.decimal(v) }
    }
    private mutating func takeMeaning() -> ParameterMeaning? {
        defer { meaning = nil }
        return meaning
    }
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
    mutating func hex(slice b: ArraySlice<UInt8>) { if startValue() { details.hexBytes(b) } }
    mutating func quotedText(_ utf8: ArraySlice<UInt8>) {
        guard startValue() else { return }
        details.put(UInt8(ascii: "\""))
        details.text(utf8: utf8)
        details.put(UInt8(ascii: "\""))
    }
    mutating func beginObject() { meaning = nil; if startValue() { details.put(UInt8(ascii: "{")); nesting.push() } }
    mutating func endObject() { if inParams { details.put(UInt8(ascii: "}")); nesting.pop() } }
    mutating func beginArray() { meaning = nil; if startValue() { details.put(UInt8(ascii: "[")); nesting.push() } }
    mutating func endArray() { if inParams { details.put(UInt8(ascii: "]")); nesting.pop() } }
}
