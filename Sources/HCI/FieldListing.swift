// Listing a codec value's parameters by name without reflection: every command,
// return parameters and event parameters type hands its stored properties, in
// declaration order, to a `FieldVisitor` (Sources/HCI/FieldListing+<codec file>.swift,
// written by Scripts/field-listing.py). `trace show` and `btctl monitor` print
// parameters through it; FieldListingTests checks each listing against reflection.

/// Receives a value's fields. Names are the Swift property names.
public protocol FieldVisitor {
    mutating func key(_ name: StaticString)
    mutating func int(_ value: Int)
    /// An unsigned 64-bit value (masks, random numbers), which may not fit an Int.
    mutating func uint64(_ value: UInt64)
    mutating func bool(_ value: Bool)
    mutating func null()
    /// A named value (a status, an address type, an address).
    mutating func text(_ value: String)
    /// Bytes shown as hex (advertising data, keys, masks longer than 64 bits).
    mutating func hex(_ bytes: [UInt8])
    /// An address (written as text, most significant octet first).
    mutating func address(_ value: BluetoothAddress)
    mutating func beginObject()
    mutating func endObject()
    mutating func beginArray()
    mutating func endArray()
}

/// A value that lists its fields (a codec struct).
public protocol FieldListing: FieldValue {
    func listFields<V: FieldVisitor>(into v: inout V)
}

/// A value a `FieldVisitor` can take: integers, flags, named values, lists, codecs.
public protocol FieldValue {
    func visit<V: FieldVisitor>(_ v: inout V)
}

extension FieldListing {
    public func visit<V: FieldVisitor>(_ v: inout V) {
        v.beginObject()
        listFields(into: &v)
        v.endObject()
    }
}

extension FieldVisitor {
    public mutating func address(_ value: BluetoothAddress) { text(value.description) }

    public mutating func field(_ name: StaticString, _ value: some FieldValue) {
        key(name)
        value.visit(&self)
    }

    public mutating func bytes(_ name: StaticString, _ value: [UInt8]) {
        key(name)
        hex(value)
    }
}

extension UInt8: FieldValue { public func visit<V: FieldVisitor>(_ v: inout V) { v.int(Int(self)) } }
extension Int8: FieldValue { public func visit<V: FieldVisitor>(_ v: inout V) { v.int(Int(self)) } }
extension UInt16: FieldValue { public func visit<V: FieldVisitor>(_ v: inout V) { v.int(Int(self)) } }
extension UInt32: FieldValue { public func visit<V: FieldVisitor>(_ v: inout V) { v.int(Int(self)) } }
extension Int: FieldValue { public func visit<V: FieldVisitor>(_ v: inout V) { v.int(self) } }
extension UInt64: FieldValue { public func visit<V: FieldVisitor>(_ v: inout V) { v.uint64(self) } }
extension Bool: FieldValue { public func visit<V: FieldVisitor>(_ v: inout V) { v.bool(self) } }
extension HCIStatus: FieldValue { public func visit<V: FieldVisitor>(_ v: inout V) { v.text(description) } }
extension AddressType: FieldValue { public func visit<V: FieldVisitor>(_ v: inout V) { v.text(description) } }
extension ConnectionRole: FieldValue { public func visit<V: FieldVisitor>(_ v: inout V) { v.text(description) } }
extension BluetoothAddress: FieldValue { public func visit<V: FieldVisitor>(_ v: inout V) { v.address(self) } }

extension Optional: FieldValue where Wrapped: FieldValue {
    public func visit<V: FieldVisitor>(_ v: inout V) {
        if let self { self.visit(&v) } else { v.null() }
    }
}

extension Array: FieldValue where Element: FieldValue {
    public func visit<V: FieldVisitor>(_ v: inout V) {
        v.beginArray()
        for e in self { e.visit(&v) }
        v.endArray()
    }
}
extension HCIOpcode: FieldValue { public func visit<V: FieldVisitor>(_ v: inout V) { v.text(description) } }
