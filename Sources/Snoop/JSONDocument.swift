// A strict JSON (RFC 8259) reader for files a person writes, such as `gatt serve`'s
// database: every value keeps the line and column where it starts, so an error in
// the file (a syntax error, or a value the schema refuses) points at the spot, the
// way a compiler does: `db.json:12:9: …`. Foundation's parser on Linux accepts
// trailing commas and reports no position, which is why this exists.
//
// Bounds-checked throughout: nesting deeper than `maximumDepth` is an error, not a
// stack overflow; a number is kept as its text and read as Double or Int on demand.

/// A parsed JSON value and where it starts (1-based line and column, in characters).
package struct JSONNode: Sendable {
    package enum Value: Sendable {
        case null
        case bool(Bool)
        case number(String)
        case string(String)
        case array([JSONNode])
        /// Members in file order; keys are unique (a repeated key is a syntax error).
        case object([JSONMember])
    }
    package var value: Value
    package var line: Int
    package var column: Int

    package var position: String { "\(line):\(column)" }

    /// The JSON type's name, for messages ("expected a string, found an array").
    package var kind: String {
        switch value {
        case .null: return "null"
        case .bool: return "a boolean"
        case .number: return "a number"
        case .string: return "a string"
        case .array: return "an array"
        case .object: return "an object"
        }
    }
}

/// An object's member, with where its key starts.
package struct JSONMember: Sendable {
    package var key: String
    package var line: Int
    package var column: Int
    package var value: JSONNode
}

package struct JSONSyntaxError: Error, Equatable, CustomStringConvertible {
    package var line: Int
    package var column: Int
    package var message: String
    package var description: String { "\(line):\(column): \(message)" }
}

package struct JSONDocument {
    package static let maximumDepth = 256

    private let bytes: [UInt8]
    private var index = 0
    private var line = 1
    private var lineStart = 0
    /// UTF-8 continuation bytes since `lineStart` (only strings hold any): columns count
    /// characters, as editors do.
    private var continuations = 0

    /// Parses one JSON value filling the whole input (whitespace around it allowed).
    package static func parse(_ bytes: [UInt8]) throws(JSONSyntaxError) -> JSONNode {
        var parser = JSONDocument(bytes: bytes)
        parser.skipWhitespace()
        let value = try parser.value(depth: 0)
        parser.skipWhitespace()
        if parser.index < bytes.count { throw parser.error("unexpected \(parser.describeCurrent()) after the document") }
        return value
    }

    private init(bytes: [UInt8]) { self.bytes = bytes }

    private var column: Int { index - lineStart - continuations + 1 }

    private func error(_ message: String) -> JSONSyntaxError { JSONSyntaxError(line: line, column: column, message: message) }

    private func describeCurrent() -> String {
        guard index < bytes.count else { return "end of file" }
        let b = bytes[index]
        if b >= 0x21 && b < 0x7F { return "'\(Character(Unicode.Scalar(b)))'" }
        return "byte 0x" + String(b, radix: 16, uppercase: true)
    }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0D: index += 1
            case 0x0A:
                index += 1
                line += 1
                lineStart = index
                continuations = 0
            default: return
            }
        }
    }

    private mutating func expect(_ literal: String, _ value: JSONNode.Value, line: Int, column: Int) throws(JSONSyntaxError) -> JSONNode {
        for b in literal.utf8 {
            guard index < bytes.count, bytes[index] == b else { throw error("invalid literal (expected \(literal))") }
            index += 1
        }
        return JSONNode(value: value, line: line, column: column)
    }

    private mutating func value(depth: Int) throws(JSONSyntaxError) -> JSONNode {
        guard depth < Self.maximumDepth else { throw error("nested deeper than \(Self.maximumDepth) levels") }
        guard index < bytes.count else { throw error("unexpected end of file, expected a value") }
        let (l, c) = (line, column)
        switch bytes[index] {
        case UInt8(ascii: "{"): return try object(depth: depth, line: l, column: c)
        case UInt8(ascii: "["): return try array(depth: depth, line: l, column: c)
        case UInt8(ascii: "\""): return JSONNode(value: .string(try string()), line: l, column: c)
        case UInt8(ascii: "t"): return try expect("true", .bool(true), line: l, column: c)
        case UInt8(ascii: "f"): return try expect("false", .bool(false), line: l, column: c)
        case UInt8(ascii: "n"): return try expect("null", .null, line: l, column: c)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return JSONNode(value: .number(try number()), line: l, column: c)
        default: throw error("unexpected \(describeCurrent()), expected a value")
        }
    }

    private mutating func object(depth: Int, line l: Int, column c: Int) throws(JSONSyntaxError) -> JSONNode {
        index += 1  // {
        var members: [JSONMember] = []
        var keys: Set<String> = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return JSONNode(value: .object(members), line: l, column: c)
        }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else {
                throw error(index < bytes.count && bytes[index] == UInt8(ascii: "}") ? "trailing comma before '}'" : "unexpected \(describeCurrent()), expected a key in double quotes")
            }
            let (keyLine, keyColumn) = (line, column)
            let key = try string()
            guard keys.insert(key).inserted else { throw JSONSyntaxError(line: keyLine, column: keyColumn, message: "key '\(key)' appears twice in this object") }
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw error("unexpected \(describeCurrent()), expected ':' after the key") }
            index += 1
            skipWhitespace()
            members.append(JSONMember(key: key, line: keyLine, column: keyColumn, value: try value(depth: depth + 1)))
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end of file, expected ',' or '}'") }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "}") { index += 1; return JSONNode(value: .object(members), line: l, column: c) }
            throw error("unexpected \(describeCurrent()), expected ',' or '}'")
        }
    }

    private mutating func array(depth: Int, line l: Int, column c: Int) throws(JSONSyntaxError) -> JSONNode {
        index += 1  // [
        var elements: [JSONNode] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return JSONNode(value: .array(elements), line: l, column: c)
        }
        while true {
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") { throw error("trailing comma before ']'") }
            elements.append(try value(depth: depth + 1))
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end of file, expected ',' or ']'") }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "]") { index += 1; return JSONNode(value: .array(elements), line: l, column: c) }
            throw error("unexpected \(describeCurrent()), expected ',' or ']'")
        }
    }

    private mutating func number() throws(JSONSyntaxError) -> String {
        let start = index
        func digits(_ p: inout JSONDocument) -> Int {
            let s = p.index
            while p.index < p.bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(p.bytes[p.index]) { p.index += 1 }
            return p.index - s
        }
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) else { throw error("a number needs a digit here") }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
            if index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { throw error("a number cannot have a leading zero") }
        } else {
            _ = digits(&self)
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            guard digits(&self) > 0 else { throw error("a number needs a digit after '.'") }
        }
        if index < bytes.count, bytes[index] | 0x20 == UInt8(ascii: "e") {
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard digits(&self) > 0 else { throw error("a number needs a digit in its exponent") }
        }
        return String(decoding: bytes[start..<index], as: UTF8.self)
    }

    private mutating func hex4() throws(JSONSyntaxError) -> UInt16 {
        var v: UInt16 = 0
        for _ in 0..<4 {
            guard index < bytes.count, let d = hexDigit(bytes[index]) else { throw error("\\u needs four hex digits") }
            v = v << 4 | UInt16(d)
            index += 1
        }
        return v
    }

    private func hexDigit(_ b: UInt8) -> UInt8? {
        switch b {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return b - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return b - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return b - UInt8(ascii: "A") + 10
        default: return nil
        }
    }

    private mutating func string() throws(JSONSyntaxError) -> String {
        index += 1  // opening quote
        var scalars = String.UnicodeScalarView()
        var run = index  // start of the bytes copied as they are
        func flush(_ p: JSONDocument, _ until: Int, into s: inout String.UnicodeScalarView) {
            if run < until { s.append(contentsOf: String(decoding: p.bytes[run..<until], as: UTF8.self).unicodeScalars) }
        }
        while true {
            guard index < bytes.count else { throw error("unterminated string") }
            let b = bytes[index]
            switch b {
            case UInt8(ascii: "\""):
                flush(self, index, into: &scalars)
                index += 1
                return String(scalars)
            case UInt8(ascii: "\\"):
                flush(self, index, into: &scalars)
                index += 1
                guard index < bytes.count else { throw error("unterminated string") }
                let e = bytes[index]
                index += 1
                switch e {
                case UInt8(ascii: "\""): scalars.append("\"")
                case UInt8(ascii: "\\"): scalars.append("\\")
                case UInt8(ascii: "/"): scalars.append("/")
                case UInt8(ascii: "b"): scalars.append("\u{8}")
                case UInt8(ascii: "f"): scalars.append("\u{C}")
                case UInt8(ascii: "n"): scalars.append("\n")
                case UInt8(ascii: "r"): scalars.append("\r")
                case UInt8(ascii: "t"): scalars.append("\t")
                case UInt8(ascii: "u"):
                    let high = try hex4()
                    var scalar: Unicode.Scalar?
                    if (0xD800..<0xDC00).contains(high) {
                        guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                            throw error("a \\u high surrogate must be followed by a \\u low surrogate")
                        }
                        index += 2
                        let low = try hex4()
                        guard (0xDC00..<0xE000).contains(low) else { throw error("a \\u high surrogate must be followed by a \\u low surrogate") }
                        scalar = Unicode.Scalar(0x10000 + (UInt32(high - 0xD800) << 10) + UInt32(low - 0xDC00))
                    } else {
                        scalar = Unicode.Scalar(high)
                    }
                    guard let scalar else { throw error("\\u escape is not a Unicode scalar (lone low surrogate)") }
                    scalars.append(scalar)
                default:
                    index -= 1
                    throw error("unknown escape '\\\(Character(Unicode.Scalar(e)))'")
                }
                run = index
            case 0x00..<0x20:
                throw error(b == 0x0A ? "unterminated string (a line break must be written \\n)" : "control character 0x\(String(b, radix: 16)) in a string (escape it)")
            default:
                if b & 0xC0 == 0x80 { continuations += 1 }
                index += 1
            }
        }
    }
}

// MARK: Reading a schema out of a document

/// An error in a document that parsed, at the position of the value it is about:
/// `line:column: path: message`.
package struct JSONSchemaError: Error, CustomStringConvertible {
    package var line: Int
    package var column: Int
    package var path: String
    package var message: String
    package init(_ node: JSONNode, _ path: String, _ message: String) {
        (line, column, self.path, self.message) = (node.line, node.column, path, message)
    }
    package init(key member: JSONMember, _ path: String, _ message: String) {
        (line, column, self.path, self.message) = (member.line, member.column, path, message)
    }
    package var description: String { "\(line):\(column): \(path.isEmpty ? "" : path + ": ")\(message)" }
}

/// An object member by member, with its JSON path: typed getters that name the path
/// and position of a value of the wrong type, and a check that no unknown key is left.
package struct JSONObjectReader {
    package let node: JSONNode
    package let path: String
    private let members: [JSONMember]

    package init(_ node: JSONNode, path: String) throws(JSONSchemaError) {
        guard case let .object(m) = node.value else { throw JSONSchemaError(node, path, "expected an object, found \(node.kind)") }
        (self.node, self.path, members) = (node, path, m)
    }

    package func member(_ key: String) -> JSONNode? { members.first { $0.key == key }?.value }
    package func path(_ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

    /// Refuses keys outside `allowed`, naming the first unknown one where it is.
    package func allowOnly(_ allowed: Set<String>) throws(JSONSchemaError) {
        for m in members where !allowed.contains(m.key) {
            throw JSONSchemaError(key: m, path, "unknown key '\(m.key)' (known: \(allowed.sorted().joined(separator: ", ")))")
        }
    }

    package func string(_ key: String) throws(JSONSchemaError) -> String? {
        guard let v = member(key) else { return nil }
        guard case let .string(s) = v.value else { throw JSONSchemaError(v, path(key), "expected a string, found \(v.kind)") }
        return s
    }

    package func requiredString(_ key: String) throws(JSONSchemaError) -> String {
        guard let s = try string(key) else { throw JSONSchemaError(node, path, "missing '\(key)'") }
        return s
    }

    package func bool(_ key: String) throws(JSONSchemaError) -> Bool? {
        guard let v = member(key) else { return nil }
        guard case let .bool(b) = v.value else { throw JSONSchemaError(v, path(key), "expected true or false, found \(v.kind)") }
        return b
    }

    /// An integer within `range`.
    package func int(_ key: String, in range: ClosedRange<Int>) throws(JSONSchemaError) -> Int? {
        guard let v = member(key) else { return nil }
        guard case let .number(text) = v.value, let i = Int(text), range.contains(i) else {
            throw JSONSchemaError(v, path(key), "expected an integer from \(range.lowerBound) to \(range.upperBound)")
        }
        return i
    }

    package func array(_ key: String) throws(JSONSchemaError) -> [JSONNode]? {
        guard let v = member(key) else { return nil }
        guard case let .array(a) = v.value else { throw JSONSchemaError(v, path(key), "expected an array, found \(v.kind)") }
        return a
    }

    /// An array of strings, each with its node (for errors about one element).
    package func strings(_ key: String) throws(JSONSchemaError) -> [(String, JSONNode)]? {
        guard let a = try array(key) else { return nil }
        var out: [(String, JSONNode)] = []
        for (i, e) in a.enumerated() {
            guard case let .string(s) = e.value else { throw JSONSchemaError(e, "\(path(key))[\(i)]", "expected a string, found \(e.kind)") }
            out.append((s, e))
        }
        return out
    }
}
