"""The libraries of upstream's CEL environment, with the results their documentation states.

Each table row is a selector that must evaluate to true: most are the examples of cel-go's
``ext`` documentation and Kubernetes' ``k8s.io/apiserver/pkg/cel/library`` documentation,
written as ``<call> == <documented result>``. Error rows name the documented error.
"""

from __future__ import annotations

import pytest

from kdra.dra.cel import compile_selector, make_device
from kdra.dra.cel._lib_strings import m_join
from kdra.dra.cel._rt_core import EvalError
from kdra.dra.errors import CelRuntimeError

NIC = make_device(
    "net.example.com",
    {
        "address": ("string", "10.1.2.3"),
        "model": ("string", "ConnectX-7"),
        "ports": ("int", 2),
        "firmware": ("version", "28.39.1002"),
        "url": ("string", "https://nic.example.com:8443/fw?channel=stable&channel=beta"),
    },
    {"bandwidth": "400G"},
)
N = 'device.attributes["net.example.com"]'


def _true(expression: str) -> None:
    assert compile_selector(expression).matches(NIC, "net.example.com/p/nic-0") is True


STRINGS = [
    "'hello'.charAt(4) == 'o'",
    "'hello'.charAt(5) == ''",
    "'hello mellow'.indexOf('') == 0",
    "'hello mellow'.indexOf('ello') == 1",
    "'hello mellow'.indexOf('jello') == -1",
    "'hello mellow'.indexOf('', 2) == 2",
    "'hello mellow'.indexOf('ello', 2) == 7",
    "'hello mellow'.indexOf('ello', 20) == -1",
    "'hello mellow'.lastIndexOf('') == 12",
    "'hello mellow'.lastIndexOf('ello') == 7",
    "'hello mellow'.lastIndexOf('jello') == -1",
    "'hello mellow'.lastIndexOf('ello', 6) == 1",
    "'hello mellow'.lastIndexOf('ello', 20) == -1",
    "'TacoCat'.lowerAscii() == 'tacocat'",
    "'TacoCÆt Xii'.lowerAscii() == 'tacocÆt xii'",
    "'TacoCat'.upperAscii() == 'TACOCAT'",
    "'TacoCÆt Xii'.upperAscii() == 'TACOCÆT XII'",
    "'hello hello'.replace('he', 'we') == 'wello wello'",
    "'hello hello'.replace('he', 'we', -1) == 'wello wello'",
    "'hello hello'.replace('he', 'we', 1) == 'wello hello'",
    "'hello hello'.replace('he', 'we', 0) == 'hello hello'",
    "'hello hello'.replace('', '_') == '_h_e_l_l_o_ _h_e_l_l_o_'",
    "'hello hello'.replace('h', '') == 'ello ello'",
    "'hello hello hello'.split(' ') == ['hello', 'hello', 'hello']",
    "'hello hello hello'.split(' ', 0) == []",
    "'hello hello hello'.split(' ', 1) == ['hello hello hello']",
    "'hello hello hello'.split(' ', 2) == ['hello', 'hello hello']",
    "'hello hello hello'.split(' ', -1) == ['hello', 'hello', 'hello']",
    "'a,b'.split(',') == ['a', 'b']",
    "'abc'.split('') == ['a', 'b', 'c']",
    "''.split(',') == ['']",
    "'tacocat'.substring(4) == 'cat'",
    "'tacocat'.substring(0, 4) == 'taco'",
    "'abc'.substring(1) == 'bc'",
    "'  \\ttrim\\n    '.trim() == 'trim'",
    "[].join() == ''",
    "[].join('/') == ''",
    "strings.quote('single-quote with \"double quote\"') == "
    '\'"single-quote with \\\\"double quote\\\\""\'',
    'strings.quote("two escape sequences \\a\\n") == \'"two escape sequences \\\\a\\\\n"\'',
    "'this is a string: %s\\nand an integer: %d'.format(['str', 42]) == "
    "'this is a string: str\\nand an integer: 42'",
    "'a double substituted with %%s: %s'.format([64.2]) == 'a double substituted with %s: 64.2'",
    "'%f'.format([3.14]) == '3.140000'",
    "'%.2f'.format([1234.5]) == '1,234.50'",
    "'5 in binary: %b'.format([5]) == '5 in binary: 101'",
    "'26 in hex: %x'.format([26]) == '26 in hex: 1a'",
    "'26 in hex (uppercase): %X'.format([26]) == '26 in hex (uppercase): 1A'",
    "'30 in octal: %o'.format([30]) == '30 in octal: 36'",
    "'a map inside a list: %s'.format([[1, 2, 3, {'a': 'x', 'b': 'y', 'c': 'z'}]]) == "
    '\'a map inside a list: [1, 2, 3, {"a":"x", "b":"y", "c":"z"}]\'',
    "'true bool: %s - false bool: %s\\nbinary bool: %b'.format([true, false, true]) == "
    "'true bool: true - false bool: false\\nbinary bool: 1'",
    "'%s'.format([[1.5, 'a', b'c']]) == '[1.500000, \"a\", b\"c\"]'",
    f"'{{}} ports'.replace('{{}}', string({N}.ports)) == '2 ports'",
    f"{N}.model.lowerAscii().split('-') == ['connectx', '7']",
]
REGEX = [
    "'abc 123'.find('[0-9]+') == '123'",
    "'abc 123'.find('xyz') == ''",
    "'x'.find('[a-z]') == 'x'",
    "'abc 123 def 456'.findAll('[0-9]+') == ['123', '456']",
    "'abc 123 def 456'.findAll('[0-9]+', 1) == ['123']",
    "'abc 123 def 456'.findAll('xyz') == []",
    f"{N}.model.find('[0-9]+$') == '7'",
]
LISTS = [
    "[1, 2, 3].isSorted()",
    "![1, 3, 2].isSorted()",
    "[1, 2, 3].sum() == 6",
    "[1.5, 2.0].sum() == 3.5",
    "[].sum() == 0",
    "[1, 2, 3].min() == 1 && [1, 2, 3].max() == 3",
    "[1, 2, 2, 3].indexOf(2) == 1 && [1, 2, 2, 3].lastIndexOf(2) == 2",
    "[1, 2, 3].indexOf(5) == -1",
    "[1, 2, 3, 4].slice(1, 3) == [2, 3]",
    "[1, 2, 3, 4].slice(2, 4) == [3, 4]",
    "[[1], [2, 3], [4]].flatten() == [1, 2, 3, 4]",
    "[[1], [], [], [3, 4]].flatten() == [1, 3, 4]",
    "[[[1]], [[2]]].flatten(2) == [1, 2]",
    "[3, 2, 1].sort() == [1, 2, 3]",
    "['b', 'c', 'a'].sort() == ['a', 'b', 'c']",
    "[1, 2, 3].sortBy(x, -x) == [3, 2, 1]",
    "lists.range(5) == [0, 1, 2, 3, 4]",
    "[5, 3, 1, 2].reverse() == [2, 1, 3, 5]",
    "[1, 2, 2, 3, 3, 3].distinct() == [1, 2, 3]",
    "['b', 'b', 'c', 'a', 'c'].distinct() == ['b', 'c', 'a']",
    "sets.contains([1, 2, 3, 4], [2, 3])",
    "!sets.contains([1, 2, 3], [4])",
    "sets.contains([], [])",
    "sets.equivalent([1, 2, 3], [3, 2, 1])",
    "!sets.equivalent([1], [1, 2])",
    "sets.intersects([1], [1, 2])",
    "!sets.intersects([1], [2])",
]
OPTIONAL = [
    "optional.of(1).value() == 1",
    "!optional.none().hasValue()",
    "!optional.ofNonZeroValue(0).hasValue() && !optional.ofNonZeroValue('').hasValue()",
    "optional.ofNonZeroValue([1, 2, 3]).hasValue()",
    "optional.of(1).or(optional.of(2)).value() == 1",
    "optional.none().or(optional.of(2)).value() == 2",
    "optional.none().orValue(5) == 5",
    "[1, 2].first().value() == 1 && [1, 2].last().value() == 2",
    "![].last().hasValue()",
    "optional.of(2).optMap(x, x * 10).value() == 20",
    "!optional.none().optMap(x, x * 10).hasValue()",
    "optional.of(2).optFlatMap(x, optional.of(x + 1)).value() == 3",
    "optional.unwrap([optional.of(1), optional.none()]) == [1]",
    "[optional.of(42), optional.none()].unwrapOpt() == [42]",
    "optional.of({'a': 1})['a'].value() == 1",
    "!optional.of({'a': 1}).b.hasValue()",
]
COMPREHENSIONS = [
    "[1, 2, 3].all(i, j, i < j)",
    "!{'hello': 'world', 'taco': 'taco'}.all(k, v, k != v)",
    "{'greeting': 'hello', 'farewell': 'goodbye'}"
    ".exists(k, v, k.startsWith('good') || v.endsWith('bye'))",
    "![1, 2, 4, 8, 16].exists(i, v, v == 1024 && i == 10)",
    "![1, 2, 1, 3, 1, 4].existsOne(i, v, i == 1 || v == 1)",
    "[1, 1, 2, 2, 3, 3].existsOne(i, v, i == 2 && v == 2)",
    "{'i': 0, 'j': 1, 'k': 2}.existsOne(i, v, i == 'l' || v == 1)",
    "[1, 2, 3].transformList(i, v, (i * v) + v) == [1, 4, 9]",
    "[1, 2, 3].transformList(i, v, i % 2 == 0, (i * v) + v) == [1, 9]",
    "{'greeting': 'hello'}.transformList(k, v, k) == ['greeting']",
    "[1, 2, 3].transformMap(i, v, (i * v) + v) == {0: 1, 1: 4, 2: 9}",
    "[1, 2, 3].transformMap(i, v, i % 2 == 0, (i * v) + v) == {0: 1, 2: 9}",
    "{'greeting': 'hello'}.transformMap(k, v, v + '!') == {'greeting': 'hello!'}",
    "{'hello': 'world'}.transformMapEntry(k, v, {v: k}) == {'world': 'hello'}",
    "[1, 2].transformMapEntry(i, v, {v: i}) == {1: 0, 2: 1}",
    f"{N}.all(name, value, name != '' && value != null)",
    f"{N}.exists(name, value, name == 'ports' && value == 2)",
]
KUBERNETES = [
    "semver('v1.0.0', true) == semver('1.0.0')",
    "semver('1.0', true) == semver('1.0.0')",
    "semver('01.01.01', true) == semver('1.1.1')",
    "isSemver('v1.0', true) && !isSemver('v1.0')",
    "semver('1.2.3').compareTo(semver('2.0.0')) == -1",
    f"{N}.firmware.isGreaterThan(semver('28.0.0')) && {N}.firmware.major() == 28",
    "quantity('50k').add(20).sub(quantity('100k')).sub(-50000) == quantity('20')",
    "quantity('200M').compareTo(quantity('0.2G')) == 0",
    "quantity('50M').compareTo(quantity('50Mi')) == -1",
    "quantity('50k').asInteger() == 50000 && quantity('50k').isInteger()",
    'device.capacity["net.example.com"].bandwidth.isGreaterThan(quantity("100G"))',
    "ip('127.0.0.1').family() == 4 && ip('::1').family() == 6",
    "!isIP('127.0.0.256') && !isIP(':::1') && !isIP('01.2.3.4') && isIP('::1')",
    "ip.isCanonical('127.0.0.1') && ip.isCanonical('2001:db8::abcd')",
    "!ip.isCanonical('2001:DB8::ABCD') && !ip.isCanonical('2001:db8::0:0:0:abcd')",
    "ip('0.0.0.0').isUnspecified() && ip('::').isUnspecified()",
    "ip('127.0.0.1').isLoopback() && !ip('192.168.0.1').isLoopback() && ip('::1').isLoopback()",
    "ip('224.0.0.1').isLinkLocalMulticast() && !ip('224.0.1.1').isLinkLocalMulticast()",
    "ip('ff02::1').isLinkLocalMulticast() && !ip('fd00::1').isLinkLocalMulticast()",
    "ip('169.254.169.254').isLinkLocalUnicast() && !ip('192.168.0.1').isLinkLocalUnicast()",
    "ip('fe80::1').isLinkLocalUnicast() && !ip('fd80::1').isLinkLocalUnicast()",
    "ip('192.168.0.1').isGlobalUnicast() && !ip('255.255.255.255').isGlobalUnicast()",
    "ip('2001:db8::abcd').isGlobalUnicast() && !ip('ff00::1').isGlobalUnicast()",
    "string(ip('2001:DB8::1')) == '2001:db8::1'",
    "cidr('192.168.0.0/24').containsIP(ip('192.168.0.1'))",
    "!cidr('192.168.0.0/24').containsIP(ip('192.168.1.1'))",
    "cidr('192.168.0.0/24').containsIP('192.168.0.1')",
    "!cidr('192.168.0.0/24').containsIP('::1')",
    "cidr('192.168.0.0/16').containsCIDR(cidr('192.168.10.0/24'))",
    "!cidr('192.168.1.0/24').containsCIDR(cidr('192.168.2.0/24'))",
    "cidr('192.168.0.0/16').containsCIDR('192.168.10.0/24')",
    "cidr('192.168.0.1/24').ip() == ip('192.168.0.1') && cidr('::1/128').ip().family() == 6",
    "cidr('192.168.0.1/24').masked() == cidr('192.168.0.0/24')",
    "cidr('192.168.0.0/24').prefixLength() == 24",
    "!isCIDR('192.168.0.0/33') && !isCIDR('::1/129') && isCIDR('10.0.0.0/8')",
    "string(cidr('192.168.0.1/24')) == '192.168.0.1/24'",
    f"cidr('10.0.0.0/8').containsIP({N}.address)",
    "url('https://example.com/').getScheme() == 'https' && url('/path').getScheme() == ''",
    "url('https://example.com:80/').getHost() == 'example.com:80'",
    "url('https://[::1]:80/').getHost() == '[::1]:80'",
    "url('https://[::1]/').getHost() == '[::1]'",
    "url('/path').getHost() == '' && url('https://[::1]:80/').getHostname() == '::1'",
    "url('https://127.0.0.1:80/').getHostname() == '127.0.0.1'",
    "url('https://example.com:80/').getPort() == '80'",
    "url('https://example.com/').getPort() == ''",
    "url('https://example.com/path').getEscapedPath() == '/path'",
    "url('https://example.com/path with spaces/').getEscapedPath() == '/path%20with%20spaces/'",
    "url('https://example.com').getEscapedPath() == ''",
    "url('https://example.com/path?k1=a&k2=b&k2=c').getQuery() == {'k1': ['a'], 'k2': ['b', 'c']}",
    "url('https://example.com/path?key with spaces=value with spaces').getQuery() == "
    "{'key with spaces': ['value with spaces']}",
    "url('https://example.com/path?').getQuery() == {}",
    "url('https://example.com/path').getQuery() == {}",
    "isURL('https://user:pass@example.com:80/path?query=val#fragment') && isURL('/absolute-path')",
    "!isURL('https://a:b:c/') && !isURL('../relative-path')",
    f"url({N}.url).getQuery()['channel'] == ['stable', 'beta']",
    "!format.dns1123Label().validate('my-name').hasValue()",
    "format.dns1123Label().validate('a.b').value() == ['must not contain dots']",
    "format.named('dns1123Label').hasValue() && !format.named('nope').hasValue()",
    "!format.dns1123Subdomain().validate('apiextensions.k8s.io').hasValue()",
    "!format.qualifiedName().validate('apiextensions.k8s.io/v1beta1').hasValue()",
    "!format.dns1123LabelPrefix().validate('my-label-prefix-').hasValue()",
    "!format.dns1123SubdomainPrefix().validate('mysubdomain.prefix.-').hasValue()",
    "!format.dns1035LabelPrefix().validate('my-label-prefix-').hasValue()",
    "!format.uri().validate('http://example.com').hasValue()",
    "!format.uuid().validate('123e4567-e89b-12d3-a456-426614174000').hasValue()",
    "!format.byte().validate('aGVsbG8=').hasValue() && format.byte().validate('!').hasValue()",
    "!format.date().validate('2021-01-01').hasValue()",
    "format.date().validate('2021-13-01').hasValue()",
    "!format.datetime().validate('2021-01-01T00:00:00Z').hasValue()",
    "format.labelValue().validate('-bad').value()[0].startsWith('a valid label must be')",
    "format.named('dns1035Label').value() == format.dns1035Label()",
]


@pytest.mark.parametrize(
    "expression", [*STRINGS, *REGEX, *LISTS, *OPTIONAL, *COMPREHENSIONS, *KUBERNETES]
)
def test_documented_results(expression: str) -> None:
    _true(expression)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("'hello'.charAt(-1) == ''", "index out of range: -1"),
        ("'hello mellow'.indexOf('ello', -1) == 0", "index out of range: -1"),
        ("'hello mellow'.lastIndexOf('ello', -1) == 0", "index out of range: -1"),
        ("'tacocat'.substring(-1) == ''", "index out of range: -1"),
        ("'tacocat'.substring(2, 1) == ''", "invalid substring range. start: 2, end: 1"),
        ("'%d'.format(['a']) == ''", "decimal clause can only be used on integers"),
        ("'%d %d'.format([1]) == ''", "index 1 out of range"),
        ("'%q'.format([1]) == ''", 'unrecognized formatting clause "q"'),
        ("[].min() == 0", "min called on empty list"),
        (f"[1, 2].slice({N}.ports, 1) == []", "start index must be less than or equal to end"),
        ("[1, 2].slice(0, 3) == []", "cannot slice(0, 3), list is length 2"),
        ("[[1]].flatten(-1) == []", "level must be non-negative"),
        ("optional.none().value() == 1", "optional.none() dereference"),
        ("{'a': 1, 'b': 1}.transformMapEntry(k, v, {v: k}).size() == 1", "already exists"),
        ("semver('1.0-rc', true).major() == 1", "short version cannot contain"),
        ("ip('127.0.0.256').family() == 4", "parse error during conversion from string"),
        ("ip('fe80::1%eth0').family() == 6", "with zone value is not allowed"),
        ("ip('::ffff:1.2.3.4').family() == 6", "IPv4-mapped IPv6 address"),
        ("cidr('192.168.0.0/33').prefixLength() == 33", "network address parse error"),
        ("url('../relative-path').getScheme() == ''", "URL parse error"),
        ("url('https://a:b:c/').getScheme() == ''", 'invalid port ":c" after host'),
        (f"{N}.model.charAt({N}.ports + 20) == ''", "index out of range: 22"),
        (f"{N}.ports.lowerAscii() == ''", "no matching overload"),  # attributes: run time
    ],
)
def test_documented_errors(expression: str, message: str) -> None:
    with pytest.raises(CelRuntimeError) as caught:
        compile_selector(expression).matches(NIC, "net.example.com/p/nic-0")
    assert message in caught.value.message


def test_join() -> None:
    # Upstream's estimator cannot size the elements of a list that no declared path leads
    # to, so in a device selector ['a', 'b'].join() is priced out (see test_cel_cost); the
    # function itself follows cel-go.
    assert m_join(["hello", "mellow"]) == "hellomellow"
    assert m_join(["hello", "mellow"], " ") == "hello mellow"
    assert m_join([], "/") == ""
    with pytest.raises(EvalError, match="join: invalid input: 1"):
        m_join(["a", 1])


def test_find_all_limit_and_empty_matches() -> None:
    _true("'aaa'.findAll('a', 2) == ['a', 'a'] && 'aaa'.findAll('a', 0) == []")
    _true("'hello'.findAll('l') == ['l', 'l'] && 'hello'.find('l+') == 'll'")
    # Go's FindAllString drops an empty match right after a match (Python's re keeps it)
    _true("'baaab'.findAll('a*') == ['', 'aaa', '']")
    _true("'héllo wörld'.findAll('[^ ]+') == ['héllo', 'wörld'] && 'é'.findAll('') == ['', '']")
