// Maps kept sorted by key, for the packet paths' per-packet look-ups by a 16-bit
// handle (connection handle, attribute handle, CID): there a Dictionary's hashing
// (SipHash over two bytes) cost more than the work it found.

/// Values by 16-bit handle, in ascending handle order (`SortedMap`).
public typealias HandleMap<Value> = SortedMap<UInt16, Value>

/// Values by key, in ascending key order.
///
/// A look-up is a binary search over the keys: no hashing, and for the handful of
/// links, channels or subscriptions a host has, a few comparisons. Adding or removing
/// a key moves the ones above it (a link coming or going, not a packet). Iteration is
/// in key order, the same every run (a `Dictionary`'s order changes with the
/// process's hash seed).
public struct SortedMap<Key: Comparable, Value> {
    @usableFromInline var keys_: [Key] = []
    /// Never nil at rest: optional so that `map[h]?.field = x` changes the value in
    /// place (`_modify` yields the slot itself) instead of copying it out and back.
    @usableFromInline var values_: [Value?] = []

    @inlinable public init() {}

    /// The keys, ascending.
    @inlinable public var keys: [Key] { keys_ }
    /// The values, in their keys' order.
    @inlinable public var values: [Value] { values_.map { $0! } }
    @inlinable public var count: Int { keys_.count }
    @inlinable public var isEmpty: Bool { keys_.isEmpty }

    /// Where `key` is, or where it would go (found: false).
    @inlinable func position(of key: Key) -> (index: Int, found: Bool) {
        var low = 0, high = keys_.count
        while low < high {
            let mid = (low &+ high) >> 1
            let k = keys_[mid]
            if k == key { return (mid, true) }
            if k < key { low = mid &+ 1 } else { high = mid }
        }
        return (low, false)
    }

    @inlinable public func contains(_ key: Key) -> Bool { position(of: key).found }

    @inlinable public subscript(key: Key) -> Value? {
        get {
            let (i, found) = position(of: key)
            return found ? values_[i] : nil
        }
        set {
            let (i, found) = position(of: key)
            switch (found, newValue) {
            case (true, let v?): values_[i] = v
            case (true, nil):
                keys_.remove(at: i)
                values_.remove(at: i)
            case (false, let v?):
                keys_.insert(key, at: i)
                values_.insert(v, at: i)
            case (false, nil): break
            }
        }
        _modify {
            let (i, found) = position(of: key)
            if found {
                yield &values_[i]
                if values_[i] == nil {
                    keys_.remove(at: i)
                    values_.remove(at: i)
                }
            } else {
                var added: Value? = nil
                yield &added
                if let added {
                    keys_.insert(key, at: i)
                    values_.insert(added, at: i)
                }
            }
        }
    }

    /// The value for `key`, `defaultValue()` stored first when there is none: changed
    /// in place (`map[h, default: 0] += 1`).
    @inlinable public subscript(key: Key, default defaultValue: @autoclosure () -> Value) -> Value {
        get { self[key] ?? defaultValue() }
        _modify {
            var (i, found) = position(of: key)
            if !found {
                keys_.insert(key, at: i)
                values_.insert(defaultValue(), at: i)
                found = true
            }
            yield &values_[i]!  // safe: a stored value is never nil (inserted just above, or found)
        }
    }

    /// Calls `body` on the value for `key` in place, if there is one; nil when there is none.
    @inlinable public mutating func withValue<T>(for key: Key, _ body: (inout Value) throws -> T) rethrows -> T? {
        let (i, found) = position(of: key)
        guard found else { return nil }
        return try body(&values_[i]!)  // safe: a stored value is never nil (found above)
    }

    @inlinable @discardableResult
    public mutating func updateValue(_ value: Value, forKey key: Key) -> Value? {
        let (i, found) = position(of: key)
        if found {
            let old = values_[i]
            values_[i] = value
            return old
        }
        keys_.insert(key, at: i)
        values_.insert(value, at: i)
        return nil
    }

    @inlinable @discardableResult
    public mutating func removeValue(forKey key: Key) -> Value? {
        let (i, found) = position(of: key)
        guard found else { return nil }
        keys_.remove(at: i)
        return values_.remove(at: i)
    }

    @inlinable public mutating func removeAll() {
        keys_.removeAll()
        values_.removeAll()
    }

    /// The entries that pass `isIncluded`, in key order.
    @inlinable public func filter(_ isIncluded: (Element) throws -> Bool) rethrows -> SortedMap {
        var out = SortedMap()
        for e in self where try isIncluded(e) {
            out.keys_.append(e.key)
            out.values_.append(e.value)
        }
        return out
    }

    @inlinable public func mapValues<T>(_ transform: (Value) throws -> T) rethrows -> SortedMap<Key, T> {
        var out = SortedMap<Key, T>()
        out.keys_ = keys_
        out.values_ = try values_.map { try transform($0!) }
        return out
    }
}

extension SortedMap where Key: Hashable {
    /// The same entries as a `Dictionary`.
    @inlinable public var dictionary: [Key: Value] { Dictionary(uniqueKeysWithValues: zip(keys_, values_.lazy.map { $0! })) }
}

/// A sequence, not a collection: a collection's subscript by position would make
/// `map[0x0040]` ambiguous with the look-up by handle.
extension SortedMap: Sequence {
    public typealias Element = (key: Key, value: Value)

    public struct Iterator: IteratorProtocol {
        @usableFromInline let map: SortedMap
        @usableFromInline var position = 0
        @inlinable init(map: SortedMap) { self.map = map }
        @inlinable public mutating func next() -> Element? {
            guard position < map.keys_.count else { return nil }
            defer { position &+= 1 }
            return (map.keys_[position], map.values_[position]!)  // safe: a stored value is never nil
        }
    }

    @inlinable public func makeIterator() -> Iterator { Iterator(map: self) }
    @inlinable public var underestimatedCount: Int { keys_.count }
}

extension SortedMap: ExpressibleByDictionaryLiteral {
    /// Later entries for the same key replace earlier ones.
    @inlinable public init(dictionaryLiteral elements: (Key, Value)...) {
        for (k, v) in elements { self[k] = v }
    }
}

extension SortedMap where Key: Hashable {
    /// The entries of `dictionary`, sorted by key.
    @inlinable public init(_ dictionary: [Key: Value]) {
        for (k, v) in dictionary.sorted(by: { $0.key < $1.key }) {
            keys_.append(k)
            values_.append(v)
        }
    }
}

extension SortedMap: Sendable where Key: Sendable, Value: Sendable {}

extension SortedMap: Equatable where Value: Equatable {
    @inlinable public static func == (a: SortedMap, b: SortedMap) -> Bool { a.keys_ == b.keys_ && a.values_ == b.values_ }
}

extension SortedMap: Hashable where Key: Hashable, Value: Hashable {
    @inlinable public func hash(into hasher: inout Hasher) {
        hasher.combine(keys_)
        hasher.combine(values_)
    }
}

extension SortedMap: CustomStringConvertible {
    /// As a dictionary prints, in key order (a handle in hex).
    public var description: String {
        "[" + zip(keys_, values).map { k, v in
            guard let h = k as? UInt16 else { return "\(k): \(v)" }
            let hex = String(h, radix: 16, uppercase: true)
            return "0x" + String(repeating: "0", count: 4 - hex.count) + hex + ": \(v)"
        }.joined(separator: ", ") + "]"
    }
}
